/**
 * Docker and Compose for test/compose.test.ts: commands with bounded time, whether an engine and
 * Compose are usable here, and one Compose project whose containers are found by Compose's labels
 * (the same for docker-compose 1.x and `docker compose`).
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

/** The images Dockerfile and docker-compose.yml start from (build, runtime, Redis); scripts/docker-base-images.sh makes them where no registry is reachable. */
const BASE_IMAGES = ['node:20-bookworm-slim', 'debian:bookworm-slim', 'redis:7'];

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end, or kills it after `timeoutMs` (then `code` is null). */
function run(
  cmd: string,
  args: string[],
  opts: { timeoutMs: number; env?: NodeJS.ProcessEnv; cwd?: string },
): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code: signal ? null : code, stdout, stderr });
    });
  });
}

/** `run`, failing with the command's own words unless it exits 0; gives its stdout. */
export async function runOk(
  cmd: string,
  args: string[],
  opts: { timeoutMs: number; env?: NodeJS.ProcessEnv; cwd?: string },
): Promise<string> {
  const r = await run(cmd, args, opts);
  if (r.code !== 0) {
    const how = r.code === null ? `was killed after ${opts.timeoutMs} ms` : `exited ${r.code}`;
    throw new Error(`${cmd} ${args.join(' ')} ${how}:\n${(r.stderr + r.stdout).slice(-4000)}`);
  }
  return r.stdout;
}

function works(cmd: string, args: string[]): boolean {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 30_000 });
  return !r.error && r.status === 0;
}

/** `docker compose` (v2) where installed, else docker-compose 1.x; undefined without either. */
function composeCommand(): string[] | undefined {
  if (works('docker', ['compose', 'version'])) return ['docker', 'compose'];
  if (works('docker-compose', ['version'])) return ['docker-compose'];
  return undefined;
}

/** Why this machine cannot run Compose for real, in words; undefined when it can. */
export function whyNoDocker(): string | undefined {
  const info = spawnSync('docker', ['info', '--format', '{{.ServerVersion}}'], { encoding: 'utf8', timeout: 30_000 });
  if (info.error) return `no docker command (${info.error.message}); .ci/run installs docker.io and starts dockerd`;
  if (info.status !== 0) {
    const why = (info.stderr || info.stdout).trim().split('\n').at(-1);
    return `the Docker engine is not usable (${why}); .ci/run starts dockerd, or start it yourself`;
  }
  if (!composeCommand())
    return 'neither `docker compose` nor docker-compose is installed (apt-get install docker-compose)';
  const missing = BASE_IMAGES.filter((image) => !works('docker', ['image', 'inspect', image]));
  if (missing.length > 0 && !works('debootstrap', ['--version'])) {
    return `no ${missing.join(' or ')} image and no debootstrap to make one (apt-get install debootstrap; see scripts/docker-base-images.sh)`;
  }
  return undefined;
}

/** The JSON lines of a log (pino's), other lines skipped. */
export function jsonLines(text: string): Array<Record<string, any>> {
  const lines: Array<Record<string, any>> = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      lines.push(JSON.parse(line) as Record<string, any>);
    } catch {
      // A line cut by the end of the stream.
    }
  }
  return lines;
}

let emptyEnvFile: string | undefined;

/** An empty file for `--env-file`: Compose would otherwise read a developer's .env beside the compose file. */
function noEnvFile(): string {
  if (!emptyEnvFile) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-compose-'));
    process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
    emptyEnvFile = path.join(dir, 'empty.env');
    fs.writeFileSync(emptyEnvFile, '');
  }
  return emptyEnvFile;
}

/** One Compose project of `file`, with a name of its own and only the settings it is given. */
export class ComposeProject {
  readonly name = `tservetest${process.pid}${Math.random().toString(36).slice(2, 8)}`;
  private readonly command: string[];

  /** `env`: the whole environment of every compose command (no .env file is read). */
  constructor(
    private readonly file: string,
    private readonly env: NodeJS.ProcessEnv,
  ) {
    const command = composeCommand();
    if (!command) throw new Error('no Compose installed');
    this.command = command;
  }

  compose(args: string[], timeoutMs: number): Promise<string> {
    const [cmd, ...pre] = this.command;
    return runOk(cmd, [...pre, '-p', this.name, '-f', this.file, '--env-file', noEnvFile(), ...args], {
      timeoutMs,
      env: this.env,
      cwd: path.dirname(this.file),
    });
  }

  /** Ids of a service's containers, stopped ones included. */
  async containers(service: string): Promise<string[]> {
    const out = await runOk(
      'docker',
      [
        'ps',
        '-a',
        '-q',
        '--no-trunc',
        '--filter',
        `label=com.docker.compose.project=${this.name}`,
        '--filter',
        `label=com.docker.compose.service=${service}`,
      ],
      { timeoutMs: 30_000 },
    );
    return out.split('\n').filter(Boolean);
  }

  async container(service: string): Promise<string> {
    const ids = await this.containers(service);
    if (ids.length !== 1) throw new Error(`${service}: ${ids.length} containers, expected one`);
    return ids[0];
  }

  /** The http://127.0.0.1:<port> a service's container port is published on. */
  async url(service: string, port: number): Promise<string> {
    const out = await runOk('docker', ['port', await this.container(service), String(port)], { timeoutMs: 30_000 });
    const published = /:(\d+)\s*$/m.exec(out.split('\n')[0]);
    if (!published) throw new Error(`${service}: port ${port} is not published (${out.trim()})`);
    return `http://127.0.0.1:${published[1]}`;
  }

  /** What is left of the project in Docker: containers, networks and volumes. */
  async leftovers(): Promise<string[]> {
    const label = `label=com.docker.compose.project=${this.name}`;
    const list = async (args: string[]) =>
      (await runOk('docker', args, { timeoutMs: 30_000 })).split('\n').filter(Boolean);
    return [
      ...(await list(['ps', '-a', '--filter', label, '--format', 'container {{.Names}}'])),
      ...(await list(['network', 'ls', '--filter', label, '--format', 'network {{.Name}}'])),
      ...(await list(['volume', 'ls', '--filter', label, '--format', 'volume {{.Name}}'])),
    ];
  }

  /** Removes the project's containers, networks and volumes; harmless when there are none. */
  async down(): Promise<void> {
    await this.compose(['down', '--volumes', '--remove-orphans', '--timeout', '10'], 180_000);
  }
}

export async function inspect(id: string): Promise<Record<string, any>> {
  return (JSON.parse(await runOk('docker', ['inspect', id], { timeoutMs: 30_000 })) as Array<Record<string, any>>)[0];
}

export async function logs(id: string): Promise<string> {
  const r = await run('docker', ['logs', id], { timeoutMs: 30_000 });
  return r.stdout + r.stderr;
}

/** A container's log from its start until it stops (`docker logs -f`), so that it outlives the container's removal. */
export function followLogs(id: string, timeoutMs: number): Promise<string> {
  return run('docker', ['logs', '-f', id], { timeoutMs }).then((r) => r.stdout + r.stderr);
}

export interface HttpAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/**
 * One HTTP request with node:http, not fetch: Docker's port proxy accepts a connection and closes
 * it when the container does not (yet, or any more) listen, and Node 20's fetch (undici 6) then
 * never settles, with nothing left to keep the test's event loop alive. node:http fails with
 * ECONNRESET. `timeoutMs` bounds the request however it goes.
 */
export function httpRequest(
  url: string,
  opts: {
    method?: string;
    body?: string;
    headers?: Record<string, string>;
    agent?: http.Agent;
    timeoutMs?: number;
  } = {},
): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: opts.method ?? 'GET', headers: opts.headers, agent: opts.agent }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.once('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      res.once('error', reject);
      res.once('close', () => res.complete || reject(new Error('the answer was cut short')));
    });
    req.setTimeout(opts.timeoutMs ?? 30_000, () =>
      req.destroy(new Error(`no answer in ${opts.timeoutMs ?? 30_000} ms`)),
    );
    req.once('error', reject);
    req.end(opts.body);
  });
}
