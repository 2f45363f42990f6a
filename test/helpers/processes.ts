/**
 * The process harness the tests and the benchmarks share: start the real programs from the built
 * output, keep their output, wait for states, run a private redis-server, clean a key prefix.
 * Importing it starts nothing.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { once } from 'node:events';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { redisAnswers, type RedisTarget } from '@tserve/queue';

export { redisAnswers };

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** The models the tests and benchmarks load: MODEL_DIR, else the shared folder beside the checkout. */
export const MODEL_DIR = path.resolve(process.env.MODEL_DIR ?? path.join(ROOT, '../shared/models'));

export type Env = Record<string, string | number | undefined>;

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as net.AddressInfo).port;
  server.close();
  await once(server, 'close');
  return port;
}

/** One sample of a gateway's /metrics whose labels include `labels`; 0 when absent. */
export async function readMetric(url: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  return metricValue(await (await fetch(`${url}/metrics`)).text(), name, labels);
}

/** One sample of a Prometheus text exposition whose labels include `labels`; 0 when absent. */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (wanted.every((w) => line.includes(w))) return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return 0;
}

/**
 * A process's resident memory in MiB from /proc/<pid>/status: `rss` now (VmRSS) and `peak`, the
 * most it has held since it started or since `resetPeakMemory` (VmHWM, which the kernel keeps:
 * no sampling can miss a peak between two reads). Undefined where the process is gone.
 */
export function processMemory(pid: number | undefined): { rss: number; peak: number } | undefined {
  if (!pid) return undefined;
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const mib = (field: string) =>
      Number(new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, 'm').exec(status)?.[1] ?? NaN) / 1024;
    const [rss, peak] = [mib('VmRSS'), mib('VmHWM')];
    return Number.isFinite(rss) && Number.isFinite(peak) ? { rss, peak } : undefined;
  } catch {
    return undefined;
  }
}

/** Starts a process's peak (VmHWM) over from what it holds now (Linux's clear_refs 5); false where that is not allowed. */
export function resetPeakMemory(pid: number | undefined): boolean {
  if (!pid) return false;
  try {
    fs.writeFileSync(`/proc/${pid}/clear_refs`, '5');
    return true;
  } catch {
    return false;
  }
}

/** Polls `probe` until it gives a truthy value; a probe that throws counts as "not yet". */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined | false>,
  timeoutMs = 30_000,
  everyMs = 100,
): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: string | undefined;
  while (Date.now() < until) {
    try {
      const value = await probe();
      if (value) return value;
    } catch (err) {
      last = String(err);
    }
    await sleep(everyMs);
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last}` : ''}`);
}

/**
 * A child process whose output is kept for assertions and failure messages: all of it, or only the
 * last `keepChars` (a benchmark's gateway may log for minutes).
 */
export class Proc {
  private kept = '';
  readonly exited: Promise<number | null>;
  constructor(
    readonly name: string,
    readonly child: ChildProcess,
    private readonly keepChars = Infinity,
  ) {
    const keep = (d: Buffer) => {
      this.kept += d.toString();
      if (this.kept.length > this.keepChars) this.kept = this.kept.slice(-this.keepChars);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    this.exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  }
  get output(): string {
    return this.kept;
  }
  get pid(): number {
    return this.child.pid!;
  }
  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }
  kill(signal: NodeJS.Signals = 'SIGTERM'): void {
    if (this.running) this.child.kill(signal);
  }
  /** Sends `signal`, then SIGKILL if the process is still there after `graceMs`. */
  async stop(signal: NodeJS.Signals = 'SIGTERM', graceMs = 10_000): Promise<number | null> {
    if (!this.running) return this.child.exitCode;
    this.child.kill(signal);
    const timer = setTimeout(() => this.kill('SIGKILL'), graceMs);
    const code = await this.exited;
    clearTimeout(timer);
    return code;
  }
}

export interface NodeProgram {
  name: string;
  /** The built entry point, relative to the checkout, e.g. apps/gateway/dist/main.js. */
  script: string;
  env: Env;
  /** The environment the program starts from; the tests give it only PATH and HOME. */
  baseEnv?: NodeJS.ProcessEnv;
  nodeArgs?: string[];
  keepChars?: number;
  /** The checkout `script` is in: this one unless given (a benchmark may run another build beside it). */
  root?: string;
}

/** Starts one of the system's programs with this Node, its output piped into a Proc. */
export function startNode({ name, script, env, baseEnv, nodeArgs = [], keepChars, root = ROOT }: NodeProgram): Proc {
  const own = Object.fromEntries(
    Object.entries(env)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => [k, String(v)]),
  );
  const child = spawn(process.execPath, [...nodeArgs, path.join(root, script)], {
    // NODE_V8_COVERAGE passes through so that `npm run coverage:all` (c8) covers the processes too.
    env: {
      ...(baseEnv ?? {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        NODE_V8_COVERAGE: process.env.NODE_V8_COVERAGE,
      }),
      ...own,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Proc(name, child, keepChars);
}

/** Removes every key under `prefix`; a Redis that is gone has nothing left to clean. */
export async function cleanPrefix(redisUrl: string, prefix: string): Promise<void> {
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1, retryStrategy: () => null });
  redis.on('error', () => {});
  try {
    let cursor = '0';
    do {
      const [next, found] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      cursor = next;
      if (found.length) await redis.del(...found);
    } while (cursor !== '0');
  } catch {
    // a test that stopped its own Redis has nothing left to clean
  } finally {
    redis.disconnect();
  }
}

/**
 * A private redis-server without persistence, which its owner may stop, freeze or restart.
 * `persistDir`: an append-only file there, as compose and the manifests configure (--appendonly
 * yes). `args`: more of redis-server's settings, after this one's (a later one wins: `--port 0
 * --tls-port N` for TLS only), and `target`: how it is reached once started (TLS, a user), where
 * not at `url`.
 */
export class PrivateRedis {
  proc?: Proc;
  constructor(
    readonly port: number,
    readonly persistDir?: string,
    readonly options: { args?: string[]; target?: RedisTarget } = {},
  ) {}
  static async onFreePort(): Promise<PrivateRedis> {
    return new PrivateRedis(await freePort());
  }
  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }
  async start(): Promise<void> {
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        ...(this.persistDir ? ['--appendonly', 'yes', '--dir', this.persistDir] : ['--appendonly', 'no']),
        ...(this.options.args ?? []),
      ],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    child.on('error', () => {});
    this.proc = new Proc(`redis:${this.port}`, child);
    await waitFor(
      `redis-server on port ${this.port}`,
      async () =>
        this.proc?.running
          ? redisAnswers(this.options.target ?? this.url, 500)
          : Promise.reject(new Error(`redis-server exited: ${this.proc?.output}`)),
      10_000,
      50,
    );
  }
  /** SIGTERM shuts Redis down as a restart does, its append-only file written to the end. */
  async stop(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    await this.proc?.stop(signal);
  }
  /** Lets this process exit without waiting for the server, which is killed when this process exits. */
  detach(): void {
    const child = this.proc?.child;
    for (const handle of [child, child?.stdout, child?.stderr])
      (handle as { unref?: () => void } | null | undefined)?.unref?.();
    process.on('exit', () => this.proc?.kill('SIGKILL'));
  }
}
