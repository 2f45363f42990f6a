/**
 * Deployment files: docker-compose.yml, .env.example, Dockerfile and .dockerignore agree with the
 * code. No Docker engine is needed: the compose file is parsed, its commands are checked against the
 * built output, its settings against the config package, and `docker-compose config -q` validates it
 * when installed.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { SETTINGS } from '@tserve/config';

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
const HUB_CACHE = '/app/node_modules/@huggingface/transformers/.cache';

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
const RENAMED: Record<string, string> = { MODEL: 'WORKER_MODEL', MODEL_DIR: 'WORKER_MODEL_DIR', SHUTDOWN_GRACE_MS: 'SHUTDOWN_GRACE_SECONDS' };

/** Settings a program's `--help` lists. */
function programSettings(app: 'gateway' | 'worker'): string[] {
  const help = spawnSync(process.execPath, [path.join(ROOT, `apps/${app}/dist/main.js`), '--help'], { encoding: 'utf8' });
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
  const help = spawnSync(process.execPath, [path.join(ROOT, 'apps/launcher/dist/main.js'), '--help'], { encoding: 'utf8' });
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
    for (const name of ['redis', 'gateway', 'worker', 'dashboard']) assert.ok(compose.services?.[name], `service ${name} missing`);
    assert.deepEqual(built.map(([n]) => n).sort(), ['dashboard', 'gateway', 'worker']);
    for (const [name, s] of built) assert.ok(fs.existsSync(dockerfileOf(s)), `${name}: no Dockerfile at ${dockerfileOf(s)}`);
  });

  it('every built service runs a script that exists in the built output and starts', () => {
    assert.ok(built.length > 0);
    for (const [name, s] of built) {
      const [bin, script, ...rest] = argv(s.command);
      assert.equal(bin, 'node', `${name}: command should be "node <script>", got ${JSON.stringify(s.command)}`);
      assert.ok(script && /^apps\/[^/]+\/dist\/.+\.js$/.test(script), `${name}: ${script} is not a built app script`);
      const file = path.join(ROOT, script);
      assert.ok(fs.existsSync(file), `${name}: ${script} does not exist (run npm run build)`);
      // --help loads every import of the entry point and exits: a missing module or bad path fails here.
      const run = spawnSync(process.execPath, [file, ...rest, '--help'], { encoding: 'utf8', timeout: 60_000 });
      assert.equal(run.status, 0, `${name}: node ${script} --help exited ${run.status}: ${run.stderr}`);
    }
  });

  it('the worker scales: no container_name, no published ports', () => {
    const worker = compose.services.worker;
    assert.equal(worker.container_name, undefined, 'worker has container_name: --scale worker=N would clash');
    assert.equal(worker.ports, undefined, 'worker publishes ports: --scale worker=N would clash');
  });

  it("with no settings, the worker loads a hub model and keeps the download in a volume at transformers.js's cache", async () => {
    const e = env(compose.services.worker);
    assert.equal(resolved(e.MODEL), HUB_DEFAULT_MODEL);
    assert.equal(resolved(e.MODEL_DIR ?? ''), '', `worker MODEL_DIR defaults to ${e.MODEL_DIR}: not the hub`);
    // The image's WORKDIR is /app and its node_modules are laid out as here (same lockfile).
    const { env: transformers } = await import('@huggingface/transformers');
    assert.equal(path.posix.join('/app', path.relative(ROOT, transformers.cacheDir ?? '')), HUB_CACHE, 'transformers.js caches elsewhere');
    const cache = (compose.services.worker.volumes ?? []).map(mount).find(([, target]) => target === HUB_CACHE);
    assert.ok(cache && Object.hasOwn(compose.volumes ?? {}, cache[0]), `no named volume at ${HUB_CACHE}`);
    // The runtime user (1000) can write there: a new named volume takes the mount point's owner.
    const runtime = dockerStages(path.join(ROOT, 'Dockerfile')).at(-1)!;
    assert.ok(
      runtime.lines.some((l) => l.includes(`chown 1000:1000 ${path.posix.relative('/app', HUB_CACHE)}`)),
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
    assert.ok(Object.hasOwn(compose.volumes ?? {}, defaultOf(models[0])), `without MODELS_HOST_DIR, /models is ${defaultOf(models[0])}, not a named volume`);
  });

  it('restarts a crashed worker a few times, not forever: one that cannot load its model would only repeat why', () => {
    const m = /^on-failure:(\d+)$/.exec(compose.services.worker.restart ?? '');
    assert.ok(m, `worker restart: ${compose.services.worker.restart}`);
    assert.ok(Number(m[1]) >= 1 && Number(m[1]) <= 10, `worker restart: ${compose.services.worker.restart}`);
    for (const name of ['redis', 'gateway', 'dashboard']) assert.equal(compose.services[name].restart, 'unless-stopped', name);
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
    const named = (redis.volumes ?? []).map(mount).find(([source, target]) => target === '/data' && source && Object.hasOwn(compose.volumes ?? {}, source));
    assert.ok(named, `redis /data is not a named volume: ${JSON.stringify(redis.volumes)}`);
    assert.ok(redis.healthcheck?.test, 'redis has no healthcheck');
  });

  it('gateways listen on the container port they publish and their healthcheck asks', () => {
    for (const name of ['gateway', 'dashboard']) {
      const s = compose.services[name];
      const port = defaultOf(env(s).PORT ?? '8000');
      const targets = (s.ports ?? []).map((p) => (typeof p === 'string' ? p.split(':').at(-1)!.split('/')[0] : String(p.target)));
      assert.deepEqual(targets, [port], `${name}: publishes ${targets.join(',')} but listens on ${port}`);
      const test = argv(s.healthcheck?.test).join(' ');
      assert.ok(test.includes(`127.0.0.1:${port}/`), `${name}: healthcheck does not ask port ${port}: ${test}`);
    }
    assert.match(argv(compose.services.gateway.healthcheck?.test).join(' '), /\/ready\b/, 'gateway healthcheck should use /ready');
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
        assert.ok(stop > grace, `${name}: with SHUTDOWN_GRACE_SECONDS=${seconds}, stop_grace_period ${stop} ms <= SHUTDOWN_GRACE_MS ${grace}`);
        // Seconds, not minutes: a gateway that hangs is killed soon after its grace.
        assert.ok(stop - grace <= 60_000, `${name}: with SHUTDOWN_GRACE_SECONDS=${seconds}, stop_grace_period ${stop} ms is far past the grace`);
      }
    }
    assert.ok(compose.services.worker.stop_grace_period, 'worker: no stop_grace_period');
  });

  it('uses only settings that exist in packages/config and in --help, each read from its own name', () => {
    const help = helpSettings();
    const schema = schemaSettings();
    for (const [name, s] of built) {
      for (const [key, value] of Object.entries(env(s))) {
        assert.ok(schema.has(key), `${name}: ${key} is not a setting in packages/config/src/index.ts`);
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

  it('does not start the dashboard without its profile, and takes the model from WORKER_MODEL', () => {
    assert.deepEqual((compose.services.dashboard as { profiles?: string[] }).profiles, ['dashboard']);
    assert.equal(env(compose.services.worker).MODEL, `\${WORKER_MODEL:-${HUB_DEFAULT_MODEL}}`);
  });

  it('passes `docker-compose config -q` (docker-compose 1.x)', (t) => {
    if (!hasBinary('docker-compose', ['version'])) {
      t.skip('docker-compose is not on PATH; install it (apt-get install docker-compose) to validate the file');
      return;
    }
    const r = spawnSync('docker-compose', ['-f', COMPOSE_FILE, 'config', '-q'], { cwd: ROOT, encoding: 'utf8', env: defaultsEnv() });
    assert.equal(r.status, 0, `docker-compose config -q: ${r.stderr}${r.stdout}`);
  });

  it('passes `docker-compose config -q` with the GPU override, which reserves a GPU for the worker', (t) => {
    const gpu = parse(fs.readFileSync(path.join(ROOT, 'docker-compose.gpu.yml'), 'utf8')) as { services: Record<string, any> };
    const reservation = gpu.services.worker.deploy.resources.reservations.devices[0];
    assert.deepEqual([reservation.driver, reservation.capabilities], ['nvidia', ['gpu']]);
    assert.equal(gpu.services.worker.build.args.GPU, 'true');
    assert.match(gpu.services.worker.environment.NVIDIA_DRIVER_CAPABILITIES, /graphics/);
    if (!hasBinary('docker-compose', ['version'])) {
      t.skip('docker-compose is not on PATH');
      return;
    }
    const r = spawnSync('docker-compose', ['-f', COMPOSE_FILE, '-f', path.join(ROOT, 'docker-compose.gpu.yml'), 'config', '-q'], {
      cwd: ROOT,
      encoding: 'utf8',
      env: defaultsEnv(),
    });
    assert.equal(r.status, 0, `docker-compose config -q: ${r.stderr}${r.stdout}`);
  });

  it('passes `docker compose config -q` (Compose v2)', (t) => {
    if (!hasBinary('docker', ['compose', 'version'])) {
      t.skip('the Compose v2 plugin (`docker compose`) is not installed');
      return;
    }
    const r = spawnSync('docker', ['compose', '-f', COMPOSE_FILE, 'config', '-q'], { cwd: ROOT, encoding: 'utf8', env: defaultsEnv() });
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
    for (const { name } of entries) assert.ok(used.has(name), `.env.example sets ${name}, which docker-compose.yml does not read`);
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
    for (const { name, value } of entries) assert.ok(!value.includes('shared/'), `${name}=${value} exists only in this repository's layout`);
  });
});

describe('Dockerfile', () => {
  const stages = dockerStages(path.join(ROOT, 'Dockerfile'));
  const [build, runtime] = [stages[0], stages.at(-1)!];

  it('is multi-stage on node:20-bookworm-slim', () => {
    assert.ok(stages.length >= 2, 'single stage: build tools and dev dependencies would ship');
    for (const s of stages) assert.match(s.from, /^FROM\s+node:20-bookworm-slim\b/i, s.from);
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
        if (fs.existsSync(path.join(ROOT, manifest))) assert.ok(copied.includes(manifest), `${manifest} is not copied before npm ci`);
      }
    }
  });

  it('builds, prunes dev dependencies, and runs as a non-root user', () => {
    assert.ok(
      build.lines.some((l) => /^RUN\s+.*\bnpm run build\b/.test(l)),
      'no `npm run build`',
    );
    assert.ok(
      build.lines.some((l) => /^RUN\s+.*\bnpm prune --omit=dev\b/.test(l)),
      'dev dependencies are not pruned',
    );
    const users = runtime.lines.filter((l) => /^USER\s/i.test(l));
    assert.ok(users.length > 0, 'the runtime stage has no USER: it runs as root');
    const user = users.at(-1)!.split(/\s+/)[1].split(':')[0];
    assert.ok(!['root', '0'].includes(user), `runtime USER is ${user}`);
    assert.ok(!runtime.lines.some((l) => /^RUN\s.*\bnpm (ci|install)\b/.test(l)), 'the runtime stage installs packages itself');
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
