/**
 * Starts the real system for tests: Redis, gateway and worker processes from the built output,
 * talking over real sockets. Each test file uses its own key prefix and removes its keys after.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { queueNameFor, redisAnswers } from '@tserve/queue';

export { redisAnswers };

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const MODEL_DIR = path.resolve(process.env.MODEL_DIR ?? path.join(ROOT, '../shared/models'));
/**
 * The Redis the tests share: TEST_REDIS_URL, else the local default; when nothing answers there, a
 * private redis-server for this test process, so `npm test` needs Redis installed, not running.
 * (Resolved at the end of this module, once everything it uses is defined.)
 */

async function resolveTestRedis(): Promise<string> {
  if (process.env.TEST_REDIS_URL) return process.env.TEST_REDIS_URL;
  const fallback = 'redis://127.0.0.1:6379';
  if (await redisAnswers(fallback, 500)) return fallback;
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  child.on('error', () => {});
  // It must not keep the test process alive; it dies with it.
  child.unref();
  process.on('exit', () => child.kill('SIGKILL'));
  const url = `redis://127.0.0.1:${port}`;
  for (let i = 0; i < 50; i++) {
    if (await redisAnswers(url, 500)) return url;
    await sleep(100);
  }
  throw new Error(`the tests need Redis: nothing answers at ${fallback} and redis-server could not be started (apt-get install redis-server, or set TEST_REDIS_URL)`);
}

export function reference(): Record<string, { task: string; cases: Array<Record<string, any>> }> {
  return JSON.parse(fs.readFileSync(path.join(MODEL_DIR, 'REFERENCE.json'), 'utf8'));
}

export function uniquePrefix(name: string): string {
  return `test-${name}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

export async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as net.AddressInfo).port;
  server.close();
  await once(server, 'close');
  return port;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 30_000, everyMs = 100): Promise<T> {
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

/** A child process whose output is kept for assertions and failure messages. */
export class Proc {
  output = '';
  readonly exited: Promise<number | null>;
  constructor(readonly name: string, readonly child: ChildProcess) {
    child.stdout?.on('data', (d) => (this.output += d));
    child.stderr?.on('data', (d) => (this.output += d));
    this.exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
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
  async stop(signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 10_000): Promise<number | null> {
    if (!this.running) return this.child.exitCode;
    this.child.kill(signal);
    const timer = setTimeout(() => this.kill('SIGKILL'), timeoutMs);
    const code = await this.exited;
    clearTimeout(timer);
    return code;
  }
}

function startNode(name: string, script: string, env: Record<string, string | number | undefined>): Proc {
  const clean = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined).map(([k, v]) => [k, String(v)]));
  const child = spawn(process.execPath, [path.join(ROOT, script)], {
    // NODE_V8_COVERAGE passes through so that `npm run coverage:all` (c8) covers the processes too.
    env: { PATH: process.env.PATH, HOME: process.env.HOME, NODE_V8_COVERAGE: process.env.NODE_V8_COVERAGE, LOG_LEVEL: 'warn', ...clean },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Proc(name, child);
}

export interface WorkerOptions {
  model: string;
  env?: Record<string, string | number | undefined>;
}

/** One test's system: a prefix in Redis, one gateway, any number of workers. */
export class TestSystem {
  readonly procs: Proc[] = [];
  gateway?: Proc;
  port = 0;

  constructor(
    readonly prefix: string,
    readonly redisUrl = REDIS_URL,
    readonly common: Record<string, string | number | undefined> = {},
  ) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  private env(extra: Record<string, string | number | undefined> = {}) {
    return { REDIS_URL: this.redisUrl, QUEUE_PREFIX: this.prefix, MODEL_DIR, HEARTBEAT_MS: 200, WORKER_TTL_MS: 1500, ...this.common, ...extra };
  }

  async startGateway(env: Record<string, string | number | undefined> = {}): Promise<Proc> {
    this.port = this.port || (await freePort());
    const gateway = startNode('gateway', 'apps/gateway/dist/main.js', this.env({ PORT: this.port, HOST: '127.0.0.1', REGISTRY_REFRESH_MS: 100, ...env }));
    this.gateway = gateway;
    this.procs.push(gateway);
    await waitFor('gateway /health', async () => (await fetch(`${this.url}/health`)).ok, 20_000);
    return gateway;
  }

  startWorker(options: WorkerOptions): Proc {
    const worker = startNode(`worker ${options.model}`, 'apps/worker/dist/main.js', this.env({ MODEL: options.model, JOB_LOCK_MS: 2000, STALLED_INTERVAL_MS: 1000, ...options.env }));
    this.procs.push(worker);
    return worker;
  }

  /** Waits until the gateway sees `count` live workers for the model. */
  async waitForWorkers(model: string, count = 1, timeoutMs = 60_000): Promise<void> {
    await waitFor(`${count} worker(s) for ${model}`, async () => {
      const body = (await (await fetch(`${this.url}/ready`)).json()) as { models: Record<string, { workers: number }> };
      return (body.models[model]?.workers ?? 0) >= count;
    }, timeoutMs);
  }

  async post(pathname: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any; headers: Headers }> {
    const res = await fetch(`${this.url}${pathname}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // left as text: the assertion will show it
    }
    return { status: res.status, body: parsed, headers: res.headers };
  }

  infer(model: string, inputs: unknown, parameters?: unknown, extra: Record<string, unknown> = {}) {
    return this.post(`/models/${model}`, { inputs, ...(parameters ? { parameters } : {}), ...extra });
  }

  /** What a finished job holds: a worker's JobOutcome for every request it carried. */
  async jobReturnValue(model: string, jobId: string): Promise<any> {
    const redis = new Redis(this.redisUrl, { maxRetriesPerRequest: 1 });
    try {
      const raw = await redis.hget(`${this.prefix}:${queueNameFor(model)}:${jobId}`, 'returnvalue');
      return raw === null ? undefined : JSON.parse(raw);
    } finally {
      redis.disconnect();
    }
  }

  logs(): string {
    return this.procs.map((p) => `--- ${p.name} (pid ${p.child.pid}) ---\n${p.output.slice(-4000)}`).join('\n');
  }

  async stop(): Promise<void> {
    // A killed process writes no coverage; under c8 they get SIGTERM and shut down as in production.
    await Promise.all(this.procs.map((p) => p.stop(process.env.NODE_V8_COVERAGE ? 'SIGTERM' : 'SIGKILL')));
    await cleanPrefix(this.redisUrl, this.prefix);
  }
}

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

/** A private redis-server, so a test can stop and restart it without touching anyone else's. */
export class PrivateRedis {
  proc?: Proc;
  constructor(readonly port: number) {}
  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }
  async start(): Promise<void> {
    const child = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.proc = new Proc(`redis:${this.port}`, child);
    await waitFor(`redis on ${this.port}`, () => redisAnswers(this.url, 500), 10_000, 50);
  }
  async stop(): Promise<void> {
    await this.proc?.stop('SIGKILL');
  }
}

export const REDIS_URL = await resolveTestRedis();
