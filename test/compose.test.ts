/**
 * Deployment files: docker-compose.yml, .env.example, Dockerfile and .dockerignore agree with the
 * code. The first part needs no Docker engine: the compose file is parsed, its commands are checked
 * against the built output, its settings against the config package, and `docker-compose config -q`
 * validates it when installed. The last part runs it for real where a Docker engine is usable: it
 * builds the image, starts the stack, serves, scales and stops it under load (skipped, with the
 * reason, where Docker is not usable).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { loadGatewayConfig, loadWorkerConfig, SETTINGS, settingHelp } from '@tserve/config';
import http from 'node:http';
import {
  ComposeProject,
  followLogs,
  httpRequest,
  inspect,
  jsonLines,
  logs,
  runOk,
  whyNoDocker,
} from './helpers/docker.ts';
import { MODEL_DIR, waitFor } from './helpers/processes.ts';
import { linkedModelDir } from './helpers/fp32-models.ts';
import { dtypeFile, int8RowSource } from '../apps/worker/src/model/device.ts';
import { int8RowWeights } from '../apps/worker/src/model/int8-row/index.ts';
import { sha256File } from '../apps/worker/src/model/download.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const COMPOSE_FILE = path.join(ROOT, 'docker-compose.yml');
const COMPOSE_TEXT = fs.readFileSync(COMPOSE_FILE, 'utf8');
// Compose files are YAML 1.1 with `<<` merge keys; without `merge` the anchors' settings would be lost.
const compose = parse(COMPOSE_TEXT, { merge: true }) as {
  services: Record<string, Service>;
  volumes?: Record<string, unknown>;
};

interface Service {
  build?: string | { context?: string; dockerfile?: string; args?: Record<string, string> };
  image?: string;
  command?: string | string[];
  environment?: Record<string, string | number | boolean | null> | string[];
  ports?: Array<string | { target: number; published?: number | string }>;
  volumes?: Array<string | { type?: string; source?: string; target: string }>;
  container_name?: string;
  healthcheck?: { test: string | string[] };
  stop_grace_period?: string;
  restart?: string;
  depends_on?: string[] | Record<string, { condition?: string }>;
}

/** The model a worker serves with no settings at all. */
const HUB_DEFAULT_MODEL = 'Xenova/distilbert-base-uncased-finetuned-sst-2-english';
/** Where the hub-cache volume is mounted in the worker. */
/** Where workers keep hub downloads in the image (HF_HOME; docs/models.md). */
const HUB_CACHE = '/cache/huggingface';

const services = Object.entries(compose.services ?? {});
const built = services.filter(([, s]) => s.build !== undefined);

function env(service: Service): Record<string, string> {
  const e = service.environment ?? {};
  const entries = Array.isArray(e)
    ? e.map((line) => [line.split('=')[0], line.includes('=') ? line.slice(line.indexOf('=') + 1) : ''])
    : Object.entries(e).map(([k, v]) => [k, v === null ? '' : String(v)]);
  return Object.fromEntries(entries);
}

/** [source, target, mode] of a volume entry; `${VAR:-default}` sources hold colons of their own. */
function mount(v: NonNullable<Service['volumes']>[number]): [string, string, string] {
  if (typeof v !== 'string') return [v.source ?? '', v.target, (v as { read_only?: boolean }).read_only ? 'ro' : 'rw'];
  const vars: string[] = [];
  const parts = v.replace(/\$\{[^}]*\}/g, (m) => `\0${vars.push(m) - 1}\0`).split(':');
  const back = (p = '') => p.replace(/\0(\d+)\0/g, (_, i: string) => vars[Number(i)]);
  return [back(parts[0]), back(parts[1]), back(parts[2] ?? 'rw')];
}

function argv(command: Service['command']): string[] {
  if (command === undefined) return [];
  return Array.isArray(command) ? command.map(String) : command.trim().split(/\s+/);
}

/** The default of a `${NAME:-default}` / `${NAME-default}` value, or the value itself. */
function defaultOf(value: string): string {
  const m = /^\$\{[A-Za-z_][A-Za-z0-9_]*:?-(.*)\}$/.exec(value);
  return m ? m[1] : value;
}

/** A value with every `${NAME:-default}` replaced by its default: what the containers get from an empty .env. */
function resolved(value: string): string {
  return value.replace(/\$\{[A-Za-z_][A-Za-z0-9_]*:?-([^}]*)\}/g, '$1');
}

/**
 * Settings the compose file reads from another variable than their own name, because the host's
 * value (what `npm start` uses) means something else inside a container.
 */
const RENAMED: Record<string, string> = {
  MODEL: 'WORKER_MODEL',
  MODEL_DIR: 'WORKER_MODEL_DIR',
  SHUTDOWN_GRACE_MS: 'SHUTDOWN_GRACE_SECONDS',
};

/** Settings a program's `--help` lists. */
function programSettings(app: 'gateway' | 'worker'): string[] {
  const help = spawnSync(process.execPath, [path.join(ROOT, `apps/${app}/dist/main.js`), '--help'], {
    encoding: 'utf8',
  });
  assert.equal(help.status, 0, help.stderr);
  const table = help.stdout.split('Settings (environment variables):')[1] ?? '';
  return [...table.matchAll(/^ {2}([A-Z][A-Z0-9_]*(?: \/ [A-Z][A-Z0-9_]*)*) {2}/gm)].flatMap((m) => m[1].split(' / '));
}

/** "15s", "1m30s", "500ms" → milliseconds. */
function durationMs(value: string): number {
  const units: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1, us: 0.001 };
  let total = 0;
  const rest = value.replace(/(\d+(?:\.\d+)?)(h|ms|m|s|us)/g, (_, n: string, u: string) => {
    total += Number(n) * units[u];
    return '';
  });
  assert.equal(rest, '', `unreadable duration "${value}"`);
  return total;
}

/** Dockerfile instructions, continuation lines joined, grouped by stage. */
function dockerStages(file: string): Array<{ from: string; lines: string[] }> {
  const text = fs.readFileSync(file, 'utf8').replace(/\\\r?\n/g, ' ');
  const stages: Array<{ from: string; lines: string[] }> = [];
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    if (/^FROM\s/i.test(line)) stages.push({ from: line, lines: [] });
    else stages.at(-1)?.lines.push(line);
  }
  return stages;
}

function dockerfileOf(service: Service): string {
  const build = typeof service.build === 'string' ? { context: service.build } : (service.build ?? {});
  return path.resolve(ROOT, build.context ?? '.', build.dockerfile ?? 'Dockerfile');
}

/** Setting names as `--help` prints them (what users are told they can set). */
function helpSettings(): Set<string> {
  const help = spawnSync(process.execPath, [path.join(ROOT, 'apps/launcher/dist/main.js'), '--help'], {
    encoding: 'utf8',
  });
  assert.equal(help.status, 0, `launcher --help failed (run npm run build first): ${help.stderr}`);
  const table = help.stdout.split('Settings (environment variables):')[1] ?? '';
  const names = new Set<string>();
  for (const line of table.split('\n')) {
    const m = /^ {2}([A-Z][A-Z0-9_]*(?: \/ [A-Z][A-Z0-9_]*)*) {2}/.exec(line);
    if (m) for (const name of m[1].split(' / ')) names.add(name);
  }
  assert.ok(names.size > 10, `could not read the settings table from:\n${help.stdout}`);
  return names;
}

/** Setting names the zod schemas parse (what the processes actually read). */
function schemaSettings(): Set<string> {
  return new Set(Object.values(SETTINGS).flatMap((shape) => Object.keys(shape)));
}

function hasBinary(cmd: string, args: string[]): boolean {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return !r.error && r.status === 0;
}

describe('docker-compose.yml', () => {
  it('has the services redis, gateway, worker and dashboard; the three apps are built from this repo', () => {
    for (const name of ['redis', 'gateway', 'worker', 'dashboard'])
      assert.ok(compose.services?.[name], `service ${name} missing`);
    assert.deepEqual(built.map(([n]) => n).sort(), ['dashboard', 'gateway', 'worker']);
    for (const [name, s] of built)
      assert.ok(fs.existsSync(dockerfileOf(s)), `${name}: no Dockerfile at ${dockerfileOf(s)}`);
  });

  it('every built service runs one program of the image (`tserve gateway|worker`), and it starts', () => {
    assert.ok(built.length > 0);
    for (const [name, s] of built) {
      const [bin, program, ...rest] = argv(s.command);
      assert.equal(bin, 'tserve', `${name}: command should be "tserve <program>", got ${JSON.stringify(s.command)}`);
      assert.ok(['gateway', 'worker'].includes(program), `${name}: tserve ${program} is not a program`);
      // The image runs the program's bundle (test/release.test.ts runs those); here its build output.
      // --help loads every import of the entry point and exits: a missing module or bad path fails here.
      const file = path.join(ROOT, `apps/${program}/dist/main.js`);
      const run = spawnSync(process.execPath, [file, ...rest, '--help'], { encoding: 'utf8', timeout: 60_000 });
      assert.equal(run.status, 0, `${name}: tserve ${program} --help exited ${run.status}: ${run.stderr}`);
    }
  });

  it('the worker scales: no container_name, no published ports', () => {
    const worker = compose.services.worker;
    assert.equal(worker.container_name, undefined, 'worker has container_name: --scale worker=N would clash');
    assert.equal(worker.ports, undefined, 'worker publishes ports: --scale worker=N would clash');
  });

  it('with no settings, the worker loads a hub model and keeps the download in a volume at HF_HOME', () => {
    const e = env(compose.services.worker);
    assert.equal(resolved(e.MODEL), HUB_DEFAULT_MODEL);
    assert.equal(resolved(e.MODEL_DIR ?? ''), '', `worker MODEL_DIR defaults to ${e.MODEL_DIR}: not the hub`);
    assert.equal(resolved(e.HF_HOME ?? ''), HUB_CACHE, 'the worker keeps its downloads elsewhere');
    const cache = (compose.services.worker.volumes ?? []).map(mount).find(([, target]) => target === HUB_CACHE);
    assert.ok(cache && Object.hasOwn(compose.volumes ?? {}, cache[0]), `no named volume at ${HUB_CACHE}`);
    // The runtime user (1000) can write there: a new named volume takes the mount point's owner.
    const runtime = dockerStages(path.join(ROOT, 'Dockerfile')).at(-1)!;
    assert.ok(
      runtime.lines.some((l) => l.includes(`chown 1000:1000 ${HUB_CACHE}`)),
      `the Dockerfile does not give ${HUB_CACHE} to user 1000`,
    );
  });

  it('MODELS_HOST_DIR is mounted read-only at /models, which WORKER_MODEL_DIR=/models loads from; unset, nothing of the host is', () => {
    assert.equal(env(compose.services.worker).MODEL_DIR, '${WORKER_MODEL_DIR:-}');
    const models = (compose.services.worker.volumes ?? []).map(mount).find(([, target]) => target === '/models');
    assert.ok(models, 'nothing is mounted at /models');
    assert.equal(models[2], 'ro', `/models is writable: ${models.join(':')}`);
    assert.match(models[0], /^\$\{MODELS_HOST_DIR:-[^}]+\}$/, `/models comes from ${models[0]}`);
    // A missing host folder would be made by Docker (empty, root's) and fail the worker on "no config.json".
    assert.ok(
      Object.hasOwn(compose.volumes ?? {}, defaultOf(models[0])),
      `without MODELS_HOST_DIR, /models is ${defaultOf(models[0])}, not a named volume`,
    );
  });

  it('restarts a crashed worker a few times, not forever: one that cannot load its model would only repeat why', () => {
    const m = /^on-failure:(\d+)$/.exec(compose.services.worker.restart ?? '');
    assert.ok(m, `worker restart: ${compose.services.worker.restart}`);
    assert.ok(Number(m[1]) >= 1 && Number(m[1]) <= 10, `worker restart: ${compose.services.worker.restart}`);
    for (const name of ['redis', 'gateway', 'dashboard'])
      assert.equal(compose.services[name].restart, 'unless-stopped', name);
  });

  it('stops the gateways before the workers, so that what they answer on the way out still has workers', () => {
    for (const name of ['gateway', 'dashboard']) {
      const deps = compose.services[name].depends_on;
      assert.ok(deps && !Array.isArray(deps), `${name}: no depends_on conditions`);
      assert.equal(deps.redis?.condition, 'service_healthy', `${name} does not wait for Redis`);
      // service_started, not healthy: a gateway that starts first says why no worker serves.
      assert.equal(deps.worker?.condition, 'service_started', `${name} does not depend on the worker`);
    }
  });

  it('redis persists (appendonly yes, named volume) and never evicts, with a healthcheck', () => {
    const redis = compose.services.redis;
    assert.match(String(redis.image), /^redis:7/);
    const args = argv(redis.command).join(' ');
    assert.match(args, /--appendonly yes\b/, `redis command: ${args}`);
    assert.match(args, /--maxmemory-policy noeviction\b/, `redis command: ${args}`);
    const named = (redis.volumes ?? [])
      .map(mount)
      .find(([source, target]) => target === '/data' && source && Object.hasOwn(compose.volumes ?? {}, source));
    assert.ok(named, `redis /data is not a named volume: ${JSON.stringify(redis.volumes)}`);
    assert.ok(redis.healthcheck?.test, 'redis has no healthcheck');
  });

  it('gateways listen on the container ports they publish and their healthcheck asks', () => {
    for (const name of ['gateway', 'dashboard']) {
      const s = compose.services[name];
      const port = defaultOf(env(s).PORT ?? '8000');
      // HTTP, and gRPC unless it is off (GRPC_PORT 0).
      const grpcPort = defaultOf(env(s).GRPC_PORT ?? '8001');
      const listening = grpcPort === '0' ? [port] : [port, grpcPort];
      const targets = (s.ports ?? []).map((p) =>
        typeof p === 'string' ? p.split(':').at(-1)!.split('/')[0] : String(p.target),
      );
      assert.deepEqual(
        targets,
        listening,
        `${name}: publishes ${targets.join(',')} but listens on ${listening.join(',')}`,
      );
      const test = argv(s.healthcheck?.test).join(' ');
      assert.ok(test.includes(`127.0.0.1:${port}/`), `${name}: healthcheck does not ask port ${port}: ${test}`);
    }
    assert.match(
      argv(compose.services.gateway.healthcheck?.test).join(' '),
      /\/ready\b/,
      'gateway healthcheck should use /ready',
    );
  });

  it('the public gateway has no dashboard credentials; the dashboard service takes them from the environment', () => {
    const pub = env(compose.services.gateway);
    for (const key of ['DASHBOARD_USER', 'DASHBOARD_PASSWORD', 'DASHBOARD_TOKEN']) {
      assert.equal(pub[key] ?? '', '', `gateway sets ${key}: the dashboard would be public`);
      assert.equal(env(compose.services.dashboard)[key], `\${${key}:-}`, `dashboard ${key}`);
    }
  });

  it('SIGTERM can drain: stop_grace_period exceeds SHUTDOWN_GRACE_MS, and the worker has one', () => {
    for (const name of ['gateway', 'dashboard']) {
      const s = compose.services[name];
      assert.ok(s.stop_grace_period, `${name}: no stop_grace_period (Docker's 10 s default)`);
      // One variable sets both: whatever its value, the stop period must stay the longer.
      for (const seconds of ['10', '45', '300']) {
        const at = (v: string) => v.replace(/\$\{SHUTDOWN_GRACE_SECONDS:-10\}/g, seconds);
        const grace = Number(resolved(at(env(s).SHUTDOWN_GRACE_MS ?? '10000')));
        const stop = durationMs(resolved(at(s.stop_grace_period)));
        assert.ok(
          stop > grace,
          `${name}: with SHUTDOWN_GRACE_SECONDS=${seconds}, stop_grace_period ${stop} ms <= SHUTDOWN_GRACE_MS ${grace}`,
        );
        // Seconds, not minutes: a gateway that hangs is killed soon after its grace.
        assert.ok(
          stop - grace <= 60_000,
          `${name}: with SHUTDOWN_GRACE_SECONDS=${seconds}, stop_grace_period ${stop} ms is far past the grace`,
        );
      }
    }
    assert.ok(compose.services.worker.stop_grace_period, 'worker: no stop_grace_period');
  });

  it('uses only settings that exist in packages/config and in --help, each read from its own name', () => {
    const help = helpSettings();
    const schema = schemaSettings();
    for (const [name, s] of built) {
      for (const [key, value] of Object.entries(env(s))) {
        assert.ok(schema.has(key), `${name}: ${key} is not a setting declared in packages/config/src/settings/`);
        assert.ok(help.has(key), `${name}: ${key} is missing from the --help settings table`);
        const m = /\$\{([A-Za-z_][A-Za-z0-9_]*)/.exec(value);
        if (m) assert.equal(m[1], RENAMED[key] ?? key, `${name}: ${key} is read from \${${m[1]}}`);
      }
    }
  });

  it('passes every setting of each program through to its containers (WORKER_ID excepted: replicas name themselves)', () => {
    const wanted: Record<string, string[]> = {
      gateway: programSettings('gateway'),
      dashboard: programSettings('gateway'),
      worker: programSettings('worker').filter((k) => k !== 'WORKER_ID'),
    };
    for (const [name, keys] of Object.entries(wanted)) {
      const e = env(compose.services[name]);
      const missing = keys.filter((k) => !(k in e));
      assert.deepEqual(missing, [], `${name} does not pass ${missing.join(', ')}`);
    }
  });

  it("gives each setting the program's own default, where it names one, but for the few it sets on purpose", () => {
    // Set on purpose for containers, each said in docker-compose.yml: the hub model with no settings,
    // the niceness of a worker beside its gateway, the thread count that follows the CPU quota.
    const chosen = new Set(['MODEL', 'WORKER_NICE', 'INTRA_OP_THREADS', 'HF_HOME', 'REDIS_URL']);
    const defaults = new Map(
      Object.values(SETTINGS)
        .flatMap((shape) => Object.entries(shape))
        .map(([name, schema]) => [name, settingHelp(name, schema)[1]]),
    );
    const differ: string[] = [];
    for (const [name, s] of built)
      for (const [key, value] of Object.entries(env(s))) {
        const m = /^\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}]+)\}$/.exec(value);
        // A default the help describes rather than states ("32 cpu / 128 gpu") is the program's to derive.
        if (!m || chosen.has(key) || !defaults.has(key) || defaults.get(key)!.includes(' ')) continue;
        if (m[1] !== defaults.get(key)) differ.push(`${name}: ${key} ${m[1]}, the program's ${defaults.get(key)}`);
      }
    assert.deepEqual(differ, []);
  });

  it('leaves each derived setting to its derivation unless .env sets it, and the settings its containers get load', () => {
    const derived = Object.values(SETTINGS)
      .flatMap((shape) => Object.entries(shape))
      .filter(([name, schema]) => /derived unless set/.test(settingHelp(name, schema)[2]))
      .map(([name]) => name);
    assert.ok(derived.includes('JOB_LOCK_MS') && derived.includes('HTTP_SEND_TIMEOUT_MS'));
    for (const [name, s] of built) {
      const e = env(s);
      for (const key of derived.filter((k) => k in e))
        assert.equal(e[key], `\${${key}:-}`, `${name}: ${key} would not follow its derivation`);
      const resolvedEnv = Object.fromEntries(Object.entries(e).map(([k, v]) => [k, resolved(v)]));
      assert.doesNotThrow(
        () => (name === 'worker' ? loadWorkerConfig(resolvedEnv) : loadGatewayConfig(resolvedEnv)),
        name,
      );
    }
  });

  it("the worker's mem_limit stands a quarter over its WORKER_MEMORY_MB, by default and with the GPU override (which turns the budget off)", () => {
    // Docker's units: b, k, m, g (powers of 1024).
    const bytes = (v: string) => {
      const m = /^(\d+)([bkmg]?)$/i.exec(v);
      assert.ok(m, `mem_limit ${v}`);
      return Number(m[1]) * 1024 ** 'bkmg'.indexOf((m[2] || 'b').toLowerCase());
    };
    const worker = compose.services.worker as Service & { mem_limit?: string };
    const budget = Number(resolved(env(worker).WORKER_MEMORY_MB ?? ''));
    assert.ok(budget > 0, 'the worker has a WORKER_MEMORY_MB');
    const limit = bytes(resolved(worker.mem_limit ?? ''));
    assert.ok(
      limit >= 1.25 * budget * 2 ** 20,
      `mem_limit ${worker.mem_limit} under 1.25 x WORKER_MEMORY_MB ${budget} MiB`,
    );
    const gpu = (
      parse(fs.readFileSync(path.join(ROOT, 'docker-compose.gpu.yml'), 'utf8')) as { services: Record<string, any> }
    ).services.worker;
    assert.equal(gpu.environment.WORKER_MEMORY_MB, '', 'the GPU override turns the budget off');
    assert.ok(bytes(resolved(gpu.mem_limit)) >= limit);
  });

  it('does not start the dashboard without its profile, and takes the model from WORKER_MODEL', () => {
    assert.deepEqual((compose.services.dashboard as { profiles?: string[] }).profiles, ['dashboard']);
    assert.equal(env(compose.services.worker).MODEL, `\${WORKER_MODEL:-${HUB_DEFAULT_MODEL}}`);
  });

  it('passes `docker-compose config -q` (docker-compose 1.x)', (t) => {
    if (!hasBinary('docker-compose', ['version'])) {
      t.skip('docker-compose is not on PATH; install it (apt-get install docker-compose) to validate the file');
      return;
    }
    const r = spawnSync('docker-compose', ['-f', COMPOSE_FILE, 'config', '-q'], {
      cwd: ROOT,
      encoding: 'utf8',
      env: defaultsEnv(),
    });
    assert.equal(r.status, 0, `docker-compose config -q: ${r.stderr}${r.stdout}`);
  });

  it('passes `docker-compose config -q` with the GPU override, which reserves a GPU for the worker', (t) => {
    const gpu = parse(fs.readFileSync(path.join(ROOT, 'docker-compose.gpu.yml'), 'utf8')) as {
      services: Record<string, any>;
    };
    const reservation = gpu.services.worker.deploy.resources.reservations.devices[0];
    assert.deepEqual([reservation.driver, reservation.capabilities], ['nvidia', ['gpu']]);
    assert.equal(gpu.services.worker.build.args.GPU, 'true');
    assert.match(gpu.services.worker.environment.NVIDIA_DRIVER_CAPABILITIES, /graphics/);
    if (!hasBinary('docker-compose', ['version'])) {
      t.skip('docker-compose is not on PATH');
      return;
    }
    const r = spawnSync(
      'docker-compose',
      ['-f', COMPOSE_FILE, '-f', path.join(ROOT, 'docker-compose.gpu.yml'), 'config', '-q'],
      {
        cwd: ROOT,
        encoding: 'utf8',
        env: defaultsEnv(),
      },
    );
    assert.equal(r.status, 0, `docker-compose config -q: ${r.stderr}${r.stdout}`);
  });

  it('passes `docker compose config -q` (Compose v2)', (t) => {
    if (!hasBinary('docker', ['compose', 'version'])) {
      t.skip('the Compose v2 plugin (`docker compose`) is not installed');
      return;
    }
    const r = spawnSync('docker', ['compose', '-f', COMPOSE_FILE, 'config', '-q'], {
      cwd: ROOT,
      encoding: 'utf8',
      env: defaultsEnv(),
    });
    assert.equal(r.status, 0, `docker compose config -q: ${r.stderr}${r.stdout}`);
  });
});

/** The environment without the variables the compose file interpolates, so its defaults are what is validated. */
function defaultsEnv(): NodeJS.ProcessEnv {
  const used = new Set([...COMPOSE_TEXT.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => m[1]));
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !used.has(k)));
}

describe('.env.example', () => {
  const entries = fs
    .readFileSync(path.join(ROOT, '.env.example'), 'utf8')
    .split('\n')
    .map((line) => /^(#?)([A-Z][A-Z0-9_]*)=(.*)$/.exec(line))
    .filter((m) => m !== null)
    .map(([, hash, name, value]) => ({ active: hash === '', name, value }));

  it('names only variables that docker-compose.yml reads', () => {
    const used = new Set([...COMPOSE_TEXT.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => m[1]));
    assert.ok(entries.length > 3);
    for (const { name } of entries)
      assert.ok(used.has(name), `.env.example sets ${name}, which docker-compose.yml does not read`);
  });

  it('runs as no .env does on a fresh clone; local models are a pair of lines to uncomment', () => {
    const active = entries.filter((e) => e.active);
    for (const { name, value } of active) {
      const fallback = new RegExp(`\\$\\{${name}:-([^}]*)\\}`).exec(COMPOSE_TEXT)?.[1];
      assert.equal(value, fallback, `.env.example sets ${name}=${value}; without a .env it is ${fallback}`);
    }
    const commented = new Map(entries.filter((e) => !e.active).map((e) => [e.name, e.value]));
    assert.ok(commented.has('MODELS_HOST_DIR'), 'MODELS_HOST_DIR is not shown');
    assert.equal(commented.get('WORKER_MODEL_DIR'), '/models');
    for (const { name, value } of entries)
      assert.ok(!value.includes('shared/'), `${name}=${value} exists only in this repository's layout`);
  });
});

describe('Dockerfile', () => {
  const stages = dockerStages(path.join(ROOT, 'Dockerfile'));
  const [build, runtime] = [stages[0], stages.at(-1)!];

  it('builds on node:20-bookworm-slim and runs on debian:bookworm-slim, with no Node.js or npm of its own', () => {
    assert.ok(stages.length >= 2, 'single stage: build tools and dev dependencies would ship');
    assert.match(build.from, /^FROM\s+node:20-bookworm-slim\b/i, build.from);
    assert.match(runtime.from, /^FROM\s+debian:bookworm-slim\b/i, runtime.from);
  });

  it('sets ONNXRUNTIME_NODE_INSTALL from a build ARG defaulting to skip, before npm ci', () => {
    const i = (re: RegExp) => build.lines.findIndex((l) => re.test(l));
    const arg = i(/^ARG\s+ONNXRUNTIME_NODE_INSTALL=skip\s*$/);
    const envLine = i(/^ENV\s+ONNXRUNTIME_NODE_INSTALL[= ]\$\{?ONNXRUNTIME_NODE_INSTALL\}?\s*$/);
    const ci = i(/^RUN\s+.*\bnpm ci\b/);
    assert.ok(arg >= 0, 'no `ARG ONNXRUNTIME_NODE_INSTALL=skip` in the build stage');
    assert.ok(envLine > arg, 'ONNXRUNTIME_NODE_INSTALL is not exported from the ARG');
    assert.ok(ci > envLine, 'npm ci runs before ONNXRUNTIME_NODE_INSTALL is set');
  });

  it('copies every workspace manifest before npm ci', () => {
    const ci = build.lines.findIndex((l) => /^RUN\s+.*\bnpm ci\b/.test(l));
    const copied = build.lines
      .slice(0, ci)
      .filter((l) => /^COPY\s/i.test(l))
      .join('\n');
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { workspaces: string[] };
    for (const glob of pkg.workspaces) {
      const parent = glob.replace(/\/\*$/, '');
      for (const dir of fs.readdirSync(path.join(ROOT, parent))) {
        const manifest = `${parent}/${dir}/package.json`;
        if (fs.existsSync(path.join(ROOT, manifest)))
          assert.ok(copied.includes(manifest), `${manifest} is not copied before npm ci`);
      }
    }
  });

  it('builds the release folder, takes only it into the runtime stage, and runs as a non-root user', () => {
    assert.ok(
      build.lines.some((l) => /^RUN\s+.*\bnpm run build\b.*\bscripts\/release\.ts --unpacked\b/.test(l)),
      'no `npm run build` and release folder',
    );
    const copies = runtime.lines.filter((l) => /^COPY\s/i.test(l));
    assert.deepEqual(
      copies,
      ['COPY --from=build /app/release/tserve /opt/tserve'],
      'the runtime stage takes more than the release folder',
    );
    const users = runtime.lines.filter((l) => /^USER\s/i.test(l));
    assert.ok(users.length > 0, 'the runtime stage has no USER: it runs as root');
    const user = users.at(-1)!.split(/\s+/)[1].split(':')[0];
    assert.ok(!['root', '0'].includes(user), `runtime USER is ${user}`);
    assert.ok(
      !runtime.lines.some((l) => /^RUN\s.*\bnpm (ci|install)\b/.test(l)),
      'the runtime stage installs packages itself',
    );
  });
});

describe('.dockerignore', () => {
  it('keeps host builds, models, results and secrets out of the build context', () => {
    const file = path.join(ROOT, '.dockerignore');
    assert.ok(fs.existsSync(file), 'no .dockerignore: node_modules and models would be sent to the daemon');
    const patterns = new Set(
      fs
        .readFileSync(file, 'utf8')
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l && !l.startsWith('#')),
    );
    const covered = (name: string) => patterns.has(name) || patterns.has(`**/${name}`);
    for (const name of ['node_modules', 'dist', '.git', 'models', 'bench/results', 'test/artifacts', '.env']) {
      assert.ok(covered(name), `.dockerignore does not exclude ${name}`);
    }
  });
});

/** The image the real run builds: a tag of its own, so that a user's tserve:latest is left alone, kept for the layer cache. */
const IMAGE = 'tserve:compose-test';
const LOCAL_MODEL = 'replica/MiniLM-L6-H384-uncased-sst2';
/** A hub id that exists nowhere, so that loading fails whether or not the hub is reachable. */
const MISSING_MODEL = 'tserve-compose-test/no-such-model';
/** The 503s a gateway answers at admission, before it queues anything: safe to send again. */
const REFUSALS = new Set(['overloaded', 'unavailable']);

/** Only `settings` and the compose file's own defaults: nothing from the caller's environment that the file or Compose reads. */
function composeEnv(settings: Record<string, string>): NodeJS.ProcessEnv {
  const base = Object.entries(defaultsEnv()).filter(([k]) => !k.startsWith('COMPOSE_'));
  return { ...Object.fromEntries(base), ...settings };
}

interface Label {
  label: string;
  score: number;
}

/** The texts REFERENCE.json has for a model. */
function referenceTexts(model: string): string[] {
  const all = JSON.parse(fs.readFileSync(path.join(MODEL_DIR, 'REFERENCE.json'), 'utf8')) as Record<
    string,
    { cases: Array<{ text: string }> }
  >;
  return all[model].cases.map((c) => c.text);
}

async function readyBody(
  url: string,
): Promise<{ status: number; body: { reasons: string[]; models: Record<string, { workers: number }> } }> {
  const res = await httpRequest(`${url}/ready`);
  return {
    status: res.status,
    body: JSON.parse(res.body) as { reasons: string[]; models: Record<string, { workers: number }> },
  };
}

const noDocker = whyNoDocker();

describe('docker compose, for real', { skip: noDocker }, () => {
  const projects: ComposeProject[] = [];
  const project = (settings: Record<string, string>) => {
    const p = new ComposeProject(
      COMPOSE_FILE,
      composeEnv({ TSERVE_IMAGE: IMAGE, GATEWAY_PORT: '0', GATEWAY_GRPC_PORT: '0', ...settings }),
    );
    projects.push(p);
    return p;
  };
  const retries = Number(/^on-failure:(\d+)$/.exec(compose.services.worker.restart ?? '')?.[1]);
  let buildTimes = '';

  before(async () => {
    const started = Date.now();
    // No registry is reachable from CI: the base images are made here when missing (a no-op otherwise).
    await runOk('bash', [path.join(ROOT, 'scripts/docker-base-images.sh')], { timeoutMs: 15 * 60_000 });
    const based = Date.now();
    // All three services share one image; the layer cache redoes only what changed since the last build.
    await project({}).compose(['build', 'worker'], 15 * 60_000);
    buildTimes = `base images ${((based - started) / 1000).toFixed(0)} s, image build ${((Date.now() - based) / 1000).toFixed(0)} s`;
  });

  after(async () => {
    for (const p of projects) await p.down();
  });

  it('the image weighs at most 450 MB: its Debian base and the release folder, nothing else', async (t) => {
    const bytes = Number(
      (await runOk('docker', ['image', 'inspect', '--format', '{{.Size}}', IMAGE], { timeoutMs: 30_000 })).trim(),
    );
    t.diagnostic(`image ${(bytes / 1e6).toFixed(0)} MB; ${buildTimes}`);
    assert.ok(bytes > 0 && bytes <= 450e6, `the image is ${(bytes / 1e6).toFixed(0)} MB`);
  });

  it('with no .env but the model: a worker that cannot load it says why, and Docker gives up after a few restarts', async (t) => {
    t.diagnostic(buildTimes);
    // The hub path, as with no .env at all; only the model is one that exists nowhere.
    const p = project({ WORKER_MODEL: MISSING_MODEL });
    await p.compose(['up', '-d'], 300_000);
    const worker = await p.container('worker');
    const final = await waitFor(
      `the worker to stop for good after ${retries} restarts`,
      async () => {
        const c = await inspect(worker);
        return c.State.Status === 'exited' && c.RestartCount === retries && c;
      },
      180_000,
      250,
    );
    assert.equal(final.State.ExitCode, 1);
    const said = (await logs(worker))
      .split('\n')
      .filter((line) => line.includes(`cannot load model "${MISSING_MODEL}"`));
    assert.equal(said.length, retries + 1, `the worker ran ${retries + 1} times; it said why ${said.length} times`);
    assert.match(said[0], /\(revision main\) from https:\/\/huggingface\.co/);

    const url = await p.url('gateway', 8000);
    await waitFor('/ready to give the reason', async () => {
      const { status, body } = await readyBody(url);
      return (
        status === 503 &&
        body.reasons.some((r) => r.startsWith(`model ${MISSING_MODEL} is not served: cannot load model`))
      );
    });

    // Downloads would go to the hub-cache volume at HF_HOME, writable by the worker's user.
    const mounts = final.Mounts as Array<{ Type: string; Name?: string; Destination: string; RW: boolean }>;
    const cache = mounts.find((m) => m.Destination === HUB_CACHE);
    assert.deepEqual([cache?.Type, cache?.Name, cache?.RW], ['volume', `${p.name}_hub-cache`, true]);
    const models = mounts.find((m) => m.Destination === '/models');
    assert.deepEqual(
      [models?.Type, models?.RW],
      ['volume', false],
      'without MODELS_HOST_DIR, /models is an empty volume, not a host folder',
    );
    const probe = `const fs = await import('node:fs');
      const dir = process.env.HF_HOME;
      fs.writeFileSync(dir + '/probe', 'x');
      fs.rmSync(dir + '/probe');
      console.log(JSON.stringify({ cacheDir: dir, uid: process.getuid() }));`;
    const out = await p.compose(
      ['run', '--rm', '--no-deps', '-T', 'worker', 'node', '--input-type=module', '-e', probe],
      120_000,
    );
    const seen = JSON.parse(out.trim().split('\n').at(-1) ?? '') as { cacheDir: string; uid: number };
    assert.deepEqual([path.posix.resolve(seen.cacheDir), seen.uid], [HUB_CACHE, 1000]);

    await p.down();
    assert.deepEqual(await p.leftovers(), []);
  });

  let local: ComposeProject | undefined;
  let url = '';

  it('serves a local model (MODELS_HOST_DIR, WORKER_MODEL_DIR=/models): POST / answers as transformers.js does', async () => {
    local = project({ MODELS_HOST_DIR: MODEL_DIR, WORKER_MODEL_DIR: '/models', WORKER_MODEL: LOCAL_MODEL });
    await local.compose(['up', '-d'], 300_000);
    url = await local.url('gateway', 8000);
    await waitFor('/ready', async () => (await readyBody(url)).body.models[LOCAL_MODEL]?.workers === 1, 180_000, 250);
    const gateway = await local.container('gateway');
    // Docker's own view, from the healthcheck in the compose file (its first check comes after `interval`).
    await waitFor(
      'the gateway to be healthy',
      async () => (await inspect(gateway)).State.Health?.Status === 'healthy',
      120_000,
      500,
    );

    // The worker runs DTYPE=auto: int8 per row, its file written into the hub-cache volume since
    // /models is read-only. It answers as transformers.js does in this process for the same rewrite
    // of the same file, to 1e-4 as in reference.test.ts (int8 kernels differ between CPUs).
    const linked = linkedModelDir([LOCAL_MODEL]);
    const folder = path.join(linked.dir, LOCAL_MODEL);
    const from = int8RowSource(fs.readdirSync(path.join(folder, 'onnx')));
    const file = dtypeFile(from);
    const rows = await int8RowWeights(
      folder,
      { file, sha256: await sha256File(path.join(folder, file)), from },
      path.join(linked.dir, 'cache'),
    );
    // A worker that ran on the host folder before (npm start, the other tests) left the file beside
    // the model, where this one finds it; else it wrote its own into the volume.
    const beside = fs.existsSync(path.join(MODEL_DIR, LOCAL_MODEL, rows.file));
    const place = beside ? `/models/${LOCAL_MODEL}/${rows.file}` : `${HUB_CACHE}/hub/tserve-int8-row/`;
    assert.ok(
      (await logs(await local.container('worker'))).includes(`"to":"${place}`),
      `the worker loads its int8-row file from ${place}`,
    );
    const transformers = await import('@huggingface/transformers');
    transformers.env.allowRemoteModels = false;
    transformers.env.localModelPath = `${linked.dir}/`;
    const pipe = (await transformers.pipeline('text-classification', LOCAL_MODEL, {
      dtype: 'fp32',
      model_file_name: rows.fileName,
    })) as unknown as (text: string) => Promise<Label[]>;
    for (const text of referenceTexts(LOCAL_MODEL)) {
      const res = await httpRequest(`${url}/`, {
        method: 'POST',
        body: text,
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      });
      assert.equal(res.status, 200, res.body);
      const answer = JSON.parse(res.body) as Label[];
      const [best] = await pipe(text);
      assert.equal(answer.length, 1, JSON.stringify(answer));
      assert.equal(answer[0].label, best.label, text);
      assert.ok(
        Math.abs(answer[0].score - best.score) <= 1e-4,
        `"${text}": ${answer[0].score}, in-process ${best.score}`,
      );
    }
    linked.remove();

    // What reached Docker: the stop period in seconds, the restart limit, the models read-only.
    const stop = durationMs(resolved(compose.services.gateway.stop_grace_period ?? '')) / 1000;
    assert.equal((await inspect(gateway)).Config.StopTimeout, stop);
    const worker = await inspect(await local.container('worker'));
    assert.deepEqual(worker.HostConfig.RestartPolicy, { Name: 'on-failure', MaximumRetryCount: retries });
    const models = (worker.Mounts as Array<{ Type: string; Source: string; Destination: string; RW: boolean }>).find(
      (m) => m.Destination === '/models',
    );
    assert.deepEqual([models?.Type, models?.Source, models?.RW], ['bind', MODEL_DIR, false]);
  });

  it("a worker's threads and memory budget follow its container's CPU quota and memory limit", async () => {
    const help = (flags: string[]) =>
      runOk('docker', ['run', '--rm', ...flags, IMAGE, 'tserve', 'worker', '--help'], {
        timeoutMs: 120_000,
      }).then((out) => /^Here: .*$/m.exec(out)?.[0] ?? out);
    const limited = await help(['--cpus', '1', '--memory', '1g']);
    assert.match(limited, /INTRA_OP_THREADS=0 runs 1 thread\(s\)/);
    assert.match(limited, /WORKER_MEMORY_MB unset is 819 \(a quarter under the cgroup memory limit\)/);
    const open = await help(['--cpuset-cpus', '0']);
    assert.match(open, /runs 1 thread\(s\).*is 1024 \(no cgroup memory limit\)/);
  });

  it('scales to two workers with `up -d --scale worker=2`', async () => {
    assert.ok(local, 'needs the stack of the test before');
    await local.compose(['up', '-d', '--scale', 'worker=2'], 300_000);
    await waitFor(
      '/ready to count two workers',
      async () => (await readyBody(url)).body.models[LOCAL_MODEL]?.workers === 2,
      180_000,
      250,
    );
    assert.equal((await local.containers('worker')).length, 2);
  });

  it('`down` under load answers every request the gateway accepted; the others were refused before it took them', async (t) => {
    // What "accepted" means, precisely. The gateway logs every request its HTTP handler took, with
    // its x-request-id and status, once the answer is sent or the client gone (request-log.ts); on
    // SIGTERM it stops listening, and exits by itself when no connection is left, logging "stopped".
    // A request it took and answered 503 overloaded/unavailable was refused at admission: nothing was
    // queued, and it is safe to send again. A request it never took (its listener had closed, so the
    // connection was refused, or reset by Docker's port proxy) was refused before acceptance as well.
    // Every other request it took is accepted, and must be answered 200 with the whole answer.
    assert.ok(local, 'needs the stack of the test before');
    // Requests that keep the workers busy for a while, so that they wait in the gateway, not on the
    // way: at any moment most of the clients' requests are in its hands.
    const texts = Array.from({ length: 6 }, () => referenceTexts(LOCAL_MODEL)).flat();
    const gatewayLog = followLogs(await local.container('gateway'), 300_000);
    const workerLogs = (await local.containers('worker')).map((id) => followLogs(id, 300_000));

    interface Outcome {
      sent: number;
      done: number;
      status?: number;
      id?: string;
      body?: string;
      error?: string;
    }
    const outcomes: Outcome[] = [];
    let stop = false;
    // A connection per request. A stopping gateway still takes the requests that come on keep-alive
    // connections it has open (it closes each only when it finds it idle), so clients that reuse them
    // without a pause can keep it busy until its grace runs out: a matter for the gateway, not Compose.
    const agent = new http.Agent({ keepAlive: false });
    const client = async () => {
      while (!stop) {
        const sent = Date.now();
        try {
          const res = await httpRequest(`${url}/`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ inputs: texts }),
            agent,
            timeoutMs: 60_000,
          });
          outcomes.push({
            sent,
            done: Date.now(),
            status: res.status,
            id: String(res.headers['x-request-id']),
            body: res.body,
          });
        } catch (err) {
          outcomes.push({ sent, done: Date.now(), error: (err as NodeJS.ErrnoException).code ?? String(err) });
          // The gateway is no longer listening for this client.
          return;
        }
      }
    };
    const loadStart = Date.now();
    const clients = Array.from({ length: 8 }, client);
    await waitFor('the load to run', async () => outcomes.filter((o) => o.status === 200).length >= 32, 120_000, 50);
    // No --timeout: the stop_grace_period of each service applies, as for users.
    await local.compose(['down', '--volumes', '--remove-orphans'], 300_000);
    stop = true;
    await Promise.all(clients);
    agent.destroy();
    const [gatewayText, ...workerTexts] = await Promise.all([gatewayLog, ...workerLogs]);

    const lines = jsonLines(gatewayText);
    const stopping = lines.find((l) => String(l.msg).startsWith('stopping'));
    const stopped = lines.find((l) => l.msg === 'stopped');
    assert.ok(stopping && stopped, `the gateway did not log a graceful stop (killed?):\n${gatewayText.slice(-2000)}`);
    const graceMs = Number(resolved(env(compose.services.gateway).SHUTDOWN_GRACE_MS ?? ''));
    assert.ok(
      stopped.time - stopping.time < graceMs,
      `the gateway's grace ran out (${stopped.time - stopping.time} ms): it did not answer everything`,
    );

    const took = lines.filter((l) => l.method === 'POST' && l.path === '/' && l.time >= loadStart);
    for (const l of took) {
      const ok = (l.status === 200 && !l.aborted) || (l.status === 503 && REFUSALS.has(l.error_type));
      assert.ok(ok, `the gateway took a request and did not answer it: ${JSON.stringify(l)}`);
    }
    const answered = outcomes.filter((o) => o.status !== undefined);
    const key = (id: unknown, status: unknown) => `${String(id)} ${String(status)}`;
    assert.deepEqual(
      answered.map((o) => key(o.id, o.status)).sort(),
      took.map((l) => key(l.reqId, l.status)).sort(),
      'the answers the clients got are not those the gateway logged',
    );
    for (const o of answered) {
      const body = JSON.parse(o.body ?? '') as unknown;
      if (o.status === 200) {
        assert.ok(Array.isArray(body) && body.length === texts.length, `an incomplete answer: ${o.body}`);
      } else {
        assert.ok(REFUSALS.has((body as { error_type?: string }).error_type ?? ''), `${o.status}: ${o.body}`);
      }
    }
    const refused = outcomes.filter((o) => o.error !== undefined);
    for (const o of refused)
      assert.ok(o.done >= stopping.time, `a request failed (${o.error}) before the gateway began to stop`);

    // The run did cover the stop: requests were being answered across SIGTERM, and later ones refused.
    const across = took.filter(
      (l) => l.status === 200 && l.time - l.duration_ms < stopping.time && l.time > stopping.time,
    );
    assert.ok(across.length > 0, 'no request was in flight when the gateway got SIGTERM');
    assert.ok(refused.length > 0, 'no request came after the gateway stopped listening');
    // Compose stopped the workers after the gateway (it depends on them), so they answered to the end.
    for (const text of workerTexts) {
      const signalled = jsonLines(text).find((l) => String(l.msg).startsWith('stopping'));
      assert.ok(
        signalled && signalled.time >= stopped.time,
        `a worker was stopped before the gateway had finished:\n${text.slice(-1000)}`,
      );
    }
    t.diagnostic(
      `down under load: ${answered.length} answered (${across.length} across SIGTERM), ${refused.length} refused before acceptance; ` +
        `the gateway drained in ${stopped.time - stopping.time} ms`,
    );
    assert.deepEqual(await local.leftovers(), []);
  });
});
