import type { ReadyBody } from '@tserve/contract';
import { colocatedWorkerSettings } from '../../apps/launcher/src/colocated.ts';
import { BUNDLES } from './bundle.ts';
import {
  cleanPrefix,
  freePort,
  PrivateRedis,
  Proc,
  redisAnswers,
  startNode,
  waitFor,
  type Env,
} from '../../test/helpers/processes.ts';

/**
 * The server under test, started from the built output with the tests' process harness: a private
 * Redis (unless one is given), one gateway and one worker per model. Unlike the tests, processes
 * run with the production defaults (only LOG_LEVEL is lowered) and keep only the tail of their
 * output, since a soak can make a gateway log for minutes.
 */

const TAIL = 8000;

/** Settings the bench sets itself; anything else in the environment passes through to the server. */
const OWNED = ['REDIS_URL', 'QUEUE_PREFIX', 'PORT', 'GRPC_PORT', 'HOST', 'MODEL', 'MODEL_DIR', 'LOG_LEVEL'];

/** Extra node flags for the server processes, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof" (not allowed in NODE_OPTIONS). */
const NODE_ARGS = (process.env.BENCH_SERVER_NODE_ARGS ?? '').split(/\s+/).filter(Boolean);

function startProgram(name: string, app: 'gateway' | 'worker', env: Env, root?: string): Proc {
  const inherited = Object.fromEntries(Object.entries(process.env).filter(([k]) => !OWNED.includes(k)));
  // From the release archive, the programs are the bundles beside the bench's; else `root`'s build output.
  const [script, from] = BUNDLES && root === undefined ? [`${app}.js`, BUNDLES] : [`apps/${app}/dist/main.js`, root];
  return startNode({ name, script, env, baseEnv: inherited, nodeArgs: NODE_ARGS, keepChars: TAIL, root: from });
}

export interface SystemOptions {
  modelDir: string;
  logLevel: string;
  redisUrl?: string;
  /** Another built checkout to run instead of this one (an A/B comparison's other side). */
  root?: string;
}

export class BenchSystem {
  redis?: PrivateRedis;
  redisUrl = '';
  gateway?: Proc;
  port = 0;
  readonly workers = new Map<string, Proc>();
  /** Workers beside each model's first, for measuring several of one model (`addWorker`). */
  readonly moreWorkers: Array<{ model: string; proc: Proc }> = [];
  /** Gateways beside the first, for measuring several sharing one Redis (`addGateway`). */
  readonly moreGateways: Array<{ proc: Proc; url: string }> = [];
  readonly prefix = `bench-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

  /**
   * As `npm start MODEL=<model>` runs a worker, unless the environment says otherwise: the bench
   * starts one per model, but only the model being measured works meanwhile.
   */
  private readonly colocated = colocatedWorkerSettings(1);

  constructor(private readonly options: SystemOptions) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  private env(extra: Env): Env {
    return {
      REDIS_URL: this.redisUrl,
      QUEUE_PREFIX: this.prefix,
      MODEL_DIR: this.options.modelDir,
      LOG_LEVEL: this.options.logLevel,
      ...extra,
    };
  }

  async startRedis(): Promise<void> {
    if (this.options.redisUrl) {
      this.redisUrl = this.options.redisUrl;
      if (!(await redisAnswers(this.redisUrl))) throw new Error(`nothing answers at --redis-url ${this.redisUrl}`);
      return;
    }
    // No persistence: the queue only ever holds requests in flight.
    this.redis = await PrivateRedis.onFreePort();
    await this.redis.start();
    this.redisUrl = this.redis.url;
  }

  async startGateway(extra: Env = {}): Promise<void> {
    this.port = await freePort();
    this.gateway = startProgram(
      'gateway',
      'gateway',
      this.env({ PORT: this.port, GRPC_PORT: await freePort(), HOST: '127.0.0.1', ...extra }),
      this.options.root,
    );
    await waitFor('gateway /health', async () => (await fetch(`${this.url}/health`)).ok, 20_000).catch((err) => {
      throw new Error(`${String(err)}\n${this.gateway?.output ?? ''}`);
    });
    for (const model of this.workers.keys()) await this.waitForWorkers(model, 1);
  }

  /**
   * Starts one more gateway on the same Redis and prefix; resolves with its URL once it routes to
   * every worker. `root`: another built checkout to run it from (an A/B of gateways before one worker).
   */
  async addGateway(extra: Env = {}, root = this.options.root): Promise<string> {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const proc = startProgram(
      `gateway ${this.moreGateways.length + 2}`,
      'gateway',
      this.env({ PORT: port, GRPC_PORT: await freePort(), HOST: '127.0.0.1', ...extra }),
      root,
    );
    this.moreGateways.push({ proc, url });
    for (const model of this.workers.keys()) await this.waitForWorkers(model, 1, undefined, url);
    return url;
  }

  async restartGateway(extra: Env = {}): Promise<void> {
    await this.gateway?.stop();
    await this.startGateway(extra);
  }

  /** The settings the bench's workers run with: its environment over `npm start`'s. */
  get workerSettings(): Record<string, string | undefined> {
    return { ...this.colocated, ...process.env };
  }

  /** `root`: another built checkout to run this worker from (an A/B of workers behind one gateway). */
  async startWorker(model: string, extra: Env = {}, root = this.options.root): Promise<void> {
    // The environment reaches the worker anyway (startProgram); these fill in what it leaves unset.
    const unset = Object.fromEntries(
      Object.entries(this.colocated).filter(([name]) => process.env[name] === undefined),
    );
    const worker = startProgram(`worker ${model}`, 'worker', this.env({ ...unset, MODEL: model, ...extra }), root);
    this.workers.set(model, worker);
    await this.waitForWorkers(model, 1, worker);
  }

  /** Starts one more worker of a model that has one; resolves once the gateway routes to all of them. */
  async addWorker(model: string, extra: Env = {}): Promise<void> {
    const unset = Object.fromEntries(
      Object.entries(this.colocated).filter(([name]) => process.env[name] === undefined),
    );
    const n = this.moreWorkers.filter((w) => w.model === model).length + 2;
    const proc = startProgram(
      `worker ${model} #${n}`,
      'worker',
      this.env({ ...unset, MODEL: model, ...extra }),
      this.options.root,
    );
    this.moreWorkers.push({ model, proc });
    await this.waitForWorkers(model, n, proc);
  }

  /** Replaces a model's worker, e.g. with BATCH_MAX_SIZE=1; waits until the gateway routes to the new one only. */
  async restartWorker(model: string, extra: Env = {}, root?: string): Promise<void> {
    await this.workers.get(model)?.stop();
    await this.waitForWorkers(model, 0);
    await this.startWorker(model, extra, root);
  }

  async waitForWorkers(model: string, count: number, child?: Proc, gatewayUrl = this.url): Promise<void> {
    await waitFor(
      `${count} live worker(s) for ${model}`,
      async () => {
        if (child && !child.running) throw new Error(`worker exited:\n${child.output}`);
        const body = (await (await fetch(`${gatewayUrl}/ready`)).json()) as ReadyBody;
        return (body.models[model]?.workers ?? 0) === count;
      },
      90_000,
      100,
    );
  }

  pids(): Record<string, number | undefined> {
    const pids: Record<string, number | undefined> = {
      gateway: this.gateway?.pid,
      redis: this.redis?.proc?.pid,
      bench: process.pid,
    };
    for (const [model, w] of this.workers) pids[`worker:${model.split('/').pop()}`] = w.pid;
    this.moreWorkers.forEach((w, i) => (pids[`worker:${w.model.split('/').pop()}#${i + 2}`] = w.proc.pid));
    this.moreGateways.forEach((g, i) => (pids[`gateway#${i + 2}`] = g.proc.pid));
    return pids;
  }

  /** SIGTERM first (workers leave the registry, NODE_OPTIONS=--cpu-prof profiles get written), then SIGKILL. */
  async stop(): Promise<void> {
    await Promise.allSettled(
      [...this.workers.values(), ...this.moreWorkers.map((w) => w.proc)].map((w) => w.stop('SIGTERM', 3000)),
    );
    await Promise.allSettled(this.moreGateways.map((g) => g.proc.stop('SIGTERM', 3000)));
    await this.gateway?.stop('SIGTERM', 3000);
    if (this.redis) await this.redis.stop();
    else if (this.redisUrl) await cleanPrefix(this.redisUrl, this.prefix);
  }
}
