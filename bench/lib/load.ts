import autocannon, { type Client } from 'autocannon';
import { cpuBetween, sampleCpu, type CpuUsage } from './cpu.ts';
import { summarize, mean, type Summary } from './stats.ts';
import { costPerRequest, readRedisCpu, readRedisStats, resetRedisStats, type RedisCost } from './redis-cost.ts';

/**
 * One load point against the gateway with autocannon, measured by this module rather than by
 * autocannon's own histograms: those keep whole milliseconds (too coarse for a ~2 ms request)
 * and mix every status together, while the soak needs accepted and shed requests apart.
 * Responses that complete during the warm-up are left out; so is everything after the window.
 */

export interface LoadSpec {
  url: string;
  path: string;
  /** The request body; a function is called per request (e.g. to mix lengths). */
  body: string | (() => string);
  connections: number;
  warmupSeconds: number;
  durationSeconds: number;
  /** Open loop: requests per second over all connections (autocannon's overallRate). */
  rate?: number;
  /**
   * autocannon gives each connection a quota per one-second window that starts when the
   * connection is made, so all connections of an instance fire together once a second. Several
   * instances started evenly across the second spread those bursts out.
   */
  instances?: number;
  timeoutSeconds?: number;
  /** Processes whose CPU is accounted over the measured window. */
  pids?: Record<string, number | undefined>;
  /** Called once a second from the start of the measured window (e.g. to sample RSS). */
  onSecond?: (second: number) => void;
  /** Keep per-second figures too (for the soak: does anything drift over time?). */
  timeline?: boolean;
  /** Extra request headers (e.g. an API key). */
  headers?: Record<string, string>;
  /** The system's Redis, when the bench owns it: its cost per answered request is measured over the window. */
  redisUrl?: string;
}

interface SecondStats {
  second: number;
  sent: number;
  status: Record<string, number>;
  p50: number;
  p99: number;
  max: number;
  /** p99 of each status's answers in this second: a soak's shed tail, second by second, shows a slow spell apart from a steady tail. */
  p99ByStatus: Record<string, number>;
}

interface ServerTiming {
  /** Mean of x-batch-size over successful responses: sequences in the model call that ran each. */
  batchMean: number;
  /**
   * Share of the window the worker's model calls took, from the answers: the sum of x-inference-time
   * / x-batch-size over them counts each call's time once. Exact when each request ran in one call
   * (the sweep's equal-length inputs); a model waiting for work (or for Redis) shows as less than 1.
   */
  modelBusy: number;
  queueMs: Summary;
  inferenceMs: Summary;
  gatewayTotalMs: Summary;
  /** Client latency minus x-total-time: HTTP parsing, sockets and the load generator's own delay. */
  clientOverheadMs: Summary;
  /** x-total-time minus queue and inference: enqueue round trip, result delivery, JSON. */
  pathOverheadMs: Summary;
}

export interface LoadResult {
  seconds: number;
  connections: number;
  targetRate?: number;
  /** Requests sent per second in the window (offered load). */
  sentPerSec: number;
  /** Successful (2xx) responses per second. */
  rps: number;
  status: Record<string, number>;
  socketErrors: number;
  /** Non-2xx responses plus socket errors and timeouts. */
  errors: number;
  /** Latency of successful responses. */
  latency: Summary;
  latencyByStatus: Record<string, Summary>;
  server: ServerTiming;
  cpu?: CpuUsage;
  timeline?: SecondStats[];
  redis?: RedisCost;
  /** The worker's resident memory as the point started and its peak over the point (VmHWM, reset at the start), MiB. */
  workerMemory?: { startMiB: number; peakMiB: number };
}

const HEADER_NAMES = ['x-batch-size', 'x-queue-time', 'x-inference-time', 'x-total-time'] as const;
type TimingHeaders = Partial<Record<(typeof HEADER_NAMES)[number], number>>;

function timingHeaders(raw: string[]): TimingHeaders {
  const out: TimingHeaders = {};
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i].toLowerCase() as (typeof HEADER_NAMES)[number];
    if (HEADER_NAMES.includes(name)) out[name] = Number(raw[i + 1]);
  }
  return out;
}

class Recorder {
  measuring = false;
  windowStart = 0;
  sent = 0;
  readonly perSecond: Array<{ sent: number; status: Record<string, number>; latency: Record<string, number[]> }> = [];
  socketErrors = 0;
  readonly status: Record<string, number> = {};
  readonly latency: Record<string, number[]> = {};
  readonly batch: number[] = [];
  /** Sum of x-inference-time / x-batch-size, ms. */
  modelMs = 0;
  readonly queue: number[] = [];
  readonly inference: number[] = [];
  readonly total: number[] = [];
  readonly clientOverhead: number[] = [];
  readonly pathOverhead: number[] = [];

  private bucket() {
    const i = Math.floor((performance.now() - this.windowStart) / 1000);
    return (this.perSecond[i] ??= { sent: 0, status: {}, latency: {} });
  }

  request(): void {
    if (!this.measuring) return;
    this.sent++;
    this.bucket().sent++;
  }

  response(status: number, ms: number, headers: TimingHeaders): void {
    if (!this.measuring) return;
    const key = String(status);
    const b = this.bucket();
    b.status[key] = (b.status[key] ?? 0) + 1;
    (b.latency[key] ??= []).push(ms);
    this.status[key] = (this.status[key] ?? 0) + 1;
    (this.latency[key] ??= []).push(ms);
    if (status < 200 || status >= 300) return;
    const {
      'x-batch-size': batch,
      'x-queue-time': queue,
      'x-inference-time': inference,
      'x-total-time': total,
    } = headers;
    if (batch !== undefined) this.batch.push(batch);
    if (batch && inference !== undefined) this.modelMs += inference / batch;
    if (queue !== undefined) this.queue.push(queue);
    if (inference !== undefined) this.inference.push(inference);
    if (total !== undefined) {
      this.total.push(total);
      this.clientOverhead.push(ms - total);
      if (queue !== undefined && inference !== undefined) this.pathOverhead.push(total - queue - inference);
    }
  }
}

function runInstance(
  spec: LoadSpec,
  recorder: Recorder,
  connections: number,
  rate: number | undefined,
  seconds: number,
): Promise<void> {
  const fixed = typeof spec.body === 'string';
  const headers = { 'content-type': 'application/json', ...spec.headers };
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: spec.url,
        connections,
        duration: seconds,
        timeout: spec.timeoutSeconds ?? 30,
        ...(rate ? { overallRate: rate } : {}),
        // Fixed bodies are encoded once; a generated one is rebuilt per request.
        ...(fixed
          ? { method: 'POST', headers, body: spec.body as string, requests: [{ method: 'POST', path: spec.path }] }
          : {
              requests: [
                {
                  method: 'POST',
                  path: spec.path,
                  headers,
                  setupRequest: (req) => ({ ...req, body: (spec.body as () => string)() }),
                },
              ],
            }),
        setupClient: (client: Client) => {
          const state = client as Client & { lastHeaders?: string[] };
          client.on('headers', (info) => (state.lastHeaders = info.headers));
          client.on('request', () => recorder.request());
        },
      },
      (err) => (err ? reject(err) : resolve()),
    );
    instance.on('response', (client, statusCode, _bytes, responseTime) => {
      const raw = (client as Client & { lastHeaders?: string[] }).lastHeaders ?? [];
      recorder.response(statusCode, responseTime, timingHeaders(raw));
    });
    instance.on('reqError', () => recorder.measuring && recorder.socketErrors++);
  });
}

export async function runLoad(spec: LoadSpec): Promise<LoadResult> {
  const recorder = new Recorder();
  const instances = Math.max(1, Math.min(spec.instances ?? 1, spec.connections));
  const total = spec.warmupSeconds + spec.durationSeconds;
  let cpuStart: ReturnType<typeof sampleCpu> | undefined;
  let cpuEnd: ReturnType<typeof sampleCpu> | undefined;
  let ticker: NodeJS.Timeout | undefined;
  let redisStart: Promise<number> | undefined;
  let redisEnd: ReturnType<typeof readRedisStats> | undefined;
  const windowStart = setTimeout(() => {
    if (spec.redisUrl) {
      const url = spec.redisUrl;
      redisStart = resetRedisStats(url).then(() => readRedisCpu(url));
    }
    recorder.measuring = true;
    recorder.windowStart = performance.now();
    cpuStart = spec.pids && sampleCpu(spec.pids);
    let second = 0;
    spec.onSecond?.(0);
    ticker = setInterval(() => spec.onSecond?.(++second), 1000);
  }, spec.warmupSeconds * 1000);
  const windowEnd = setTimeout(() => {
    if (spec.redisUrl) redisEnd = readRedisStats(spec.redisUrl);
    recorder.measuring = false;
    cpuEnd = spec.pids && sampleCpu(spec.pids);
    clearInterval(ticker);
  }, total * 1000);

  // Connections and rate are split over the instances with the remainders spread, so the totals hold exactly.
  const share = (total: number, i: number) => Math.floor(total / instances) + (i < total % instances ? 1 : 0);
  const runs: Promise<void>[] = [];
  for (let i = 0; i < instances; i++) {
    const offset = i / instances;
    const connections = share(spec.connections, i);
    const rate = spec.rate ? Math.max(1, share(Math.round(spec.rate), i)) : undefined;
    if (connections === 0) continue;
    runs.push(
      new Promise<void>((r) => setTimeout(r, offset * 1000)).then(() =>
        runInstance(spec, recorder, connections, rate, total - offset),
      ),
    );
  }
  try {
    await Promise.all(runs);
  } finally {
    clearTimeout(windowStart);
    clearTimeout(windowEnd);
    clearInterval(ticker);
    recorder.measuring = false;
  }

  const seconds = spec.durationSeconds;
  const ok = Object.entries(recorder.latency)
    .filter(([s]) => s.startsWith('2'))
    .flatMap(([, v]) => v);
  const redis = redisStart && redisEnd ? costPerRequest(await redisEnd, await redisStart, ok.length) : undefined;
  const non2xx = Object.entries(recorder.status)
    .filter(([s]) => !s.startsWith('2'))
    .reduce((a, [, n]) => a + n, 0);
  return {
    seconds,
    connections: spec.connections,
    targetRate: spec.rate,
    sentPerSec: recorder.sent / seconds,
    rps: ok.length / seconds,
    status: recorder.status,
    socketErrors: recorder.socketErrors,
    errors: non2xx + recorder.socketErrors,
    latency: summarize(ok),
    latencyByStatus: Object.fromEntries(Object.entries(recorder.latency).map(([s, v]) => [s, summarize(v)])),
    server: {
      batchMean: mean(recorder.batch),
      modelBusy: recorder.modelMs / (seconds * 1000),
      queueMs: summarize(recorder.queue),
      inferenceMs: summarize(recorder.inference),
      gatewayTotalMs: summarize(recorder.total),
      clientOverheadMs: summarize(recorder.clientOverhead),
      pathOverheadMs: summarize(recorder.pathOverhead),
    },
    cpu: cpuStart && cpuEnd ? cpuBetween(cpuStart, cpuEnd) : undefined,
    redis,
    timeline: spec.timeline
      ? Array.from(recorder.perSecond.slice(0, Math.ceil(seconds)), (b, second) => {
          const byStatus = Object.entries(b?.latency ?? {});
          const l = summarize(byStatus.flatMap(([, v]) => v));
          const p99ByStatus = Object.fromEntries(byStatus.map(([s, v]) => [s, summarize(v).p99]));
          return {
            second,
            sent: b?.sent ?? 0,
            status: b?.status ?? {},
            p50: l.p50,
            p99: l.p99,
            max: l.max,
            p99ByStatus,
          };
        })
      : undefined,
  };
}
