import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import type { ReadyBody } from '@tserve/contract';
import { cleanPrefix, freePort, redisAnswers, waitFor } from '../../test/helpers/system.ts';
import { ROOT } from './paths.ts';

/**
 * The server under test, started from the built output: a private Redis (unless one is given),
 * one gateway and one worker per model. Unlike the test harness, processes run with the
 * production defaults (only LOG_LEVEL is lowered) and keep only the tail of their output, since
 * a soak can make a gateway log for minutes.
 */

const TAIL = 8000;

export class Child {
  private tail = '';
  readonly exited: Promise<number | null>;
  constructor(readonly name: string, readonly child: ChildProcess) {
    const keep = (d: Buffer) => (this.tail = (this.tail + d.toString()).slice(-TAIL));
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    this.exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  }
  get pid(): number | undefined {
    return this.child.pid;
  }
  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }
  get output(): string {
    return this.tail;
  }
  async stop(signal: NodeJS.Signals = 'SIGTERM', graceMs = 10_000): Promise<void> {
    if (!this.running) return;
    this.child.kill(signal);
    const timer = setTimeout(() => this.running && this.child.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }
}

type Env = Record<string, string | number | undefined>;

/** Settings the bench sets itself; anything else in the environment passes through to the server. */
const OWNED = ['REDIS_URL', 'QUEUE_PREFIX', 'PORT', 'HOST', 'MODEL', 'MODEL_DIR', 'LOG_LEVEL'];

/** Extra node flags for the server processes, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof" (not allowed in NODE_OPTIONS). */
const NODE_ARGS = (process.env.BENCH_SERVER_NODE_ARGS ?? '').split(/\s+/).filter(Boolean);

function startNode(name: string, script: string, env: Env): Child {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => !OWNED.includes(k)));
  const own = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined).map(([k, v]) => [k, String(v)]));
  const child = spawn(process.execPath, [...NODE_ARGS, path.join(ROOT, script)], { env: { ...inherited, ...own }, stdio: ['ignore', 'pipe', 'pipe'] });
  return new Child(name, child);
}


export interface SystemOptions {
  modelDir: string;
  logLevel: string;
  redisUrl?: string;
}

export class BenchSystem {
  redis?: Child;
  redisUrl = '';
  gateway?: Child;
  port = 0;
  readonly workers = new Map<string, Child>();
  readonly prefix = `bench-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

  constructor(private readonly options: SystemOptions) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  private env(extra: Env): Env {
    return { REDIS_URL: this.redisUrl, QUEUE_PREFIX: this.prefix, MODEL_DIR: this.options.modelDir, LOG_LEVEL: this.options.logLevel, ...extra };
  }

  async startRedis(): Promise<void> {
    if (this.options.redisUrl) {
      this.redisUrl = this.options.redisUrl;
      if (!(await redisAnswers(this.redisUrl))) throw new Error(`nothing answers at --redis-url ${this.redisUrl}`);
      return;
    }
    const port = await freePort();
    this.redisUrl = `redis://127.0.0.1:${port}`;
    // No persistence: the queue only ever holds requests in flight.
    const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.redis = new Child(`redis:${port}`, child);
    await waitFor(`redis-server on port ${port}`, () => redisAnswers(this.redisUrl), 10_000, 50);
  }

  async startGateway(extra: Env = {}): Promise<void> {
    this.port = await freePort();
    this.gateway = startNode('gateway', 'apps/gateway/dist/main.js', this.env({ PORT: this.port, HOST: '127.0.0.1', ...extra }));
    await waitFor('gateway /health', async () => (await fetch(`${this.url}/health`)).ok, 20_000).catch((err) => {
      throw new Error(`${String(err)}\n${this.gateway?.output ?? ''}`);
    });
    for (const model of this.workers.keys()) await this.waitForWorkers(model, 1);
  }

  async restartGateway(extra: Env = {}): Promise<void> {
    await this.gateway?.stop();
    await this.startGateway(extra);
  }

  async startWorker(model: string, extra: Env = {}): Promise<void> {
    // As `npm start` runs them: on one host with the gateway, the model yields (WORKER_NICE) unless told otherwise.
    const worker = startNode(`worker ${model}`, 'apps/worker/dist/main.js', this.env({ WORKER_NICE: process.env.WORKER_NICE ?? 10, MODEL: model, ...extra }));
    this.workers.set(model, worker);
    await this.waitForWorkers(model, 1, worker);
  }

  /** Replaces a model's worker, e.g. with BATCH_MAX_SIZE=1; waits until the gateway routes to the new one only. */
  async restartWorker(model: string, extra: Env = {}): Promise<void> {
    await this.workers.get(model)?.stop();
    await this.waitForWorkers(model, 0);
    await this.startWorker(model, extra);
  }

  async waitForWorkers(model: string, count: number, child?: Child): Promise<void> {
    await waitFor(
      `${count} live worker(s) for ${model}`,
      async () => {
        if (child && !child.running) throw new Error(`worker exited:\n${child.output}`);
        const body = (await (await fetch(`${this.url}/ready`)).json()) as ReadyBody;
        return (body.models[model]?.workers ?? 0) === count;
      },
      90_000,
      100,
    );
  }

  pids(): Record<string, number | undefined> {
    const pids: Record<string, number | undefined> = { gateway: this.gateway?.pid, redis: this.redis?.pid, bench: process.pid };
    for (const [model, w] of this.workers) pids[`worker:${model.split('/').pop()}`] = w.pid;
    return pids;
  }

  /** SIGTERM first (workers leave the registry, NODE_OPTIONS=--cpu-prof profiles get written), then SIGKILL. */
  async stop(): Promise<void> {
    await Promise.allSettled([...this.workers.values()].map((w) => w.stop('SIGTERM', 3000)));
    await this.gateway?.stop('SIGTERM', 3000);
    if (this.redis) await this.redis.stop('SIGKILL');
    else if (this.redisUrl) await cleanPrefix(this.redisUrl, this.prefix);
  }
}
