/**
 * The real system for tests: gateway and worker processes from the built output, talking over real
 * sockets to the tests' Redis. Each test file uses its own key prefix and removes its keys after.
 * Importing it starts nothing; the Redis is ensured by test/setup.ts, which `npm test` preloads.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { queueNameFor } from '@tserve/queue';
import type { ReadyBody } from '@tserve/contract';
import { cleanPrefix, freePort, MODEL_DIR, readMetric, startNode, waitFor, type Env, type Proc } from './processes.ts';

export {
  cleanPrefix,
  freePort,
  metricValue,
  MODEL_DIR,
  PrivateRedis,
  processMemory,
  Proc,
  redisAnswers,
  ROOT,
  sleep,
  waitFor,
} from './processes.ts';

/** The tests' Redis: what test/setup.ts found or started, else the local default. */
export const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

export function reference(): Record<string, { task: string; cases: Array<Record<string, any>> }> {
  return JSON.parse(fs.readFileSync(path.join(MODEL_DIR, 'REFERENCE.json'), 'utf8'));
}

export function uniquePrefix(name: string): string {
  return `test-${name}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

/** The tests run the programs quietly (LOG_LEVEL warn) unless a test asks for more. */
function startProgram(name: string, script: string, env: Env, nodeArgs?: string[]): Proc {
  return startNode({ name, script, env: { LOG_LEVEL: 'warn', ...env }, nodeArgs });
}

export interface WorkerOptions {
  model: string;
  env?: Env;
  /** Node's own flags, before the program: a preload (`--import`), for one. */
  nodeArgs?: string[];
}

/** One test's system: a prefix in Redis, one gateway, any number of workers. */
export class TestSystem {
  readonly procs: Proc[] = [];
  gateway?: Proc;
  port = 0;
  /** The gateway's gRPC port (GRPC_PORT), a free one of its own. */
  grpcPort = 0;

  constructor(
    readonly prefix: string,
    readonly redisUrl = REDIS_URL,
    readonly common: Env = {},
  ) {}

  /** The gateway's address: under its ROOT_PATH, where the system's settings give one. */
  get url(): string {
    return `http://127.0.0.1:${this.port}${this.common.ROOT_PATH ?? ''}`;
  }

  private env(extra: Env = {}) {
    return {
      REDIS_URL: this.redisUrl,
      QUEUE_PREFIX: this.prefix,
      MODEL_DIR,
      HEARTBEAT_MS: 200,
      WORKER_TTL_MS: 1500,
      ...this.common,
      ...extra,
    };
  }

  /** `nodeArgs`: Node's own flags, before the program (a preload, for one). */
  async startGateway(env: Env = {}, nodeArgs?: string[]): Promise<Proc> {
    // A port freePort found free may be taken before the gateway binds it, as the local port of
    // some outgoing connection: the gateway then exits at once, and a first start tries new ports.
    // A restart keeps its ports, which its test's clients hold.
    const fresh = !this.port;
    for (let attempt = 1; ; attempt++) {
      this.port = this.port || (await freePort());
      this.grpcPort = this.grpcPort || (await freePort());
      const gateway = startProgram(
        'gateway',
        'apps/gateway/dist/main.js',
        this.env({ PORT: this.port, GRPC_PORT: this.grpcPort, HOST: '127.0.0.1', REGISTRY_REFRESH_MS: 100, ...env }),
        nodeArgs,
      );
      this.gateway = gateway;
      this.procs.push(gateway);
      // Up once both ports answer: the gRPC port is opened after the HTTP one.
      const grpcPort = Number(env.GRPC_PORT ?? this.grpcPort);
      const up = async () =>
        (await fetch(`${this.url}/health`)).ok && (grpcPort === 0 || (await accepts(grpcPort))) && 'up';
      const state = await waitFor('gateway /health', async () => (gateway.running ? up() : 'exited'), 20_000).catch(
        (err: unknown) => {
          throw new Error(`${String(err)}\n${gateway.output}`);
        },
      );
      if (state === 'up') return gateway;
      if (!fresh || attempt === 3 || !/EADDRINUSE|already in use/.test(gateway.output))
        throw new Error(`the gateway did not come up:\n${gateway.output}`);
      this.port = 0;
      this.grpcPort = 0;
    }
  }

  startWorker(options: WorkerOptions): Proc {
    const worker = startProgram(
      `worker ${options.model}`,
      'apps/worker/dist/main.js',
      this.env({ MODEL: options.model, JOB_LOCK_MS: 2000, STALLED_INTERVAL_MS: 1000, ...options.env }),
      options.nodeArgs,
    );
    this.procs.push(worker);
    return worker;
  }

  /** Waits until the gateway sees `count` live workers for the model. */
  async waitForWorkers(model: string, count = 1, timeoutMs = 60_000): Promise<void> {
    try {
      await waitFor(
        `${count} worker(s) for ${model}`,
        async () => {
          const body = (await (await fetch(`${this.url}/ready`)).json()) as ReadyBody;
          return (body.models[model]?.workers ?? 0) >= count;
        },
        timeoutMs,
      );
    } catch (err) {
      // What the model's workers said is what tells a slow start from a failed one.
      const said = this.procs
        .filter((p) => p.name === `worker ${model}`)
        .map((p) => `--- ${p.name} (pid ${p.pid}, ${p.running ? 'running' : 'exited'}) ---\n${p.output.slice(-2000)}`);
      throw new Error(`${(err as Error).message}\n${said.join('\n')}`);
    }
  }

  async post(
    pathname: string,
    body: unknown,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; body: any; headers: Headers }> {
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

  /** A request whose client leaves when told: `left` resolves to 'aborted' once it has. */
  leavingRequest(model: string, inputs: unknown): { leave: () => void; left: Promise<unknown> } {
    const controller = new AbortController();
    const left = fetch(`${this.url}/models/${model}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ inputs }),
      signal: controller.signal,
    }).catch(() => 'aborted');
    return { leave: () => controller.abort(), left };
  }

  /** One sample of the gateway's /metrics whose labels include `labels`; 0 when absent. */
  metric(name: string, labels: Record<string, string> = {}): Promise<number> {
    return readMetric(this.url, name, labels);
  }

  /** What a finished job holds: a worker's JobOutcome for every request it carried. */
  async jobReturnValue(model: string, jobId: string): Promise<any> {
    const redis = new Redis(this.redisUrl, { maxRetriesPerRequest: 1 });
    const queue = new Queue(queueNameFor(model), { connection: redis, prefix: this.prefix, skipMetasUpdate: true });
    try {
      const job = await queue.getJob(jobId);
      return job?.finishedOn ? job.returnvalue : undefined;
    } finally {
      await queue.close();
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

/** Whether something accepts a connection on the port, on 127.0.0.1. */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
