import { rssMiB } from './cpu.ts';
import { inferBody, inferPath, quiesce, type BenchContext } from './context.ts';
import { runLoad } from './load.ts';
import { readRedisMiB } from './redis-cost.ts';
import { loadWorkerConfig } from '@tserve/config';
import { sessionOptions } from '../../apps/worker/src/model/model.ts';
import { measureShedFloor } from './shed-floor.ts';
import { gcOverWindow, readGatewayGc, type GcReading } from './gateway-gc.ts';
import { maxOf, round, summarize, type Summary } from './stats.ts';
import type { RssSample, SoakRun } from './types.ts';

/**
 * Overload soak: open-loop load at a multiple of the measured capacity against a gateway with a
 * small queue bound and deadline. A healthy server sheds the excess at once (503), answers what
 * it accepts within the deadline, and holds its memory flat instead of piling up waiters.
 */

// autocannon's overallRate is a per-connection quota per one-second window, not a schedule: a
// connection sends its quota back to back when its window opens, and all connections of one
// instance open their windows together. One request per connection per second, and 100 instances
// whose windows open 10 ms apart, turn that into bursts of rate/100 every 10 ms (with 20
// instances, bursts of rate/20 every 50 ms, shed p99 was ~2x worse: the load shape matters).
// A connection still waiting for an answer delays its next request, as a real client would.
const REQUESTS_PER_CONNECTION = 1;
const MAX_CONNECTIONS = 4000;
export const STAGGERED_INSTANCES = 100;

export async function runSoak(
  ctx: BenchContext,
  model: string,
  text: string,
  tokens: number,
  capacityRps: number,
): Promise<SoakRun> {
  const { options, log } = ctx;
  if (ctx.system) {
    await ctx.system.restartGateway({
      MAX_QUEUE_DEPTH: options.soakQueueDepth,
      REQUEST_TIMEOUT_MS: options.soakTimeoutMs,
    });
  }
  const targetRate = Math.max(1, Math.round(capacityRps * options.soakFactor));
  const connections = Math.min(MAX_CONNECTIONS, Math.max(16, Math.ceil(targetRate / REQUESTS_PER_CONNECTION)));
  const gatewayPid = ctx.system?.gateway?.pid ?? options.gatewayPid;
  const samples: RssSample[] = [];
  const redisUrl = ctx.system?.redisUrl;
  const redisMiB = (url: string) => readRedisMiB(url).catch(() => undefined);
  let redisStart: Promise<number | undefined> | undefined;
  let gcStart: Promise<GcReading | undefined> | undefined;
  log(
    `soak: ${targetRate} req/s offered (${options.soakFactor}x ${round(capacityRps, 1)}) on ${connections} connections for ${options.soakWarmupSeconds}+${options.soakSeconds} s`,
  );

  await quiesce(ctx, model);
  const load = await runLoad({
    url: ctx.url(),
    path: inferPath(model),
    body: inferBody(text),
    connections,
    rate: targetRate,
    instances: STAGGERED_INSTANCES,
    warmupSeconds: options.soakWarmupSeconds,
    durationSeconds: options.soakSeconds,
    // Longer than the deadline, so a late answer shows up as the gateway's 504, not a socket timeout.
    timeoutSeconds: Math.ceil(options.soakTimeoutMs / 1000) + 5,
    pids: ctx.pids(),
    onSecond: (second) => {
      samples.push({ second, mib: rssMiB(gatewayPid) });
      if (redisUrl) redisStart ??= redisMiB(redisUrl);
      gcStart ??= readGatewayGc(ctx.url());
    },
    timeline: true,
  });
  const end = rssMiB(gatewayPid);
  const [gcFirst, gcLast] = [await gcStart, await readGatewayGc(ctx.url())];
  const redisEnd = redisUrl ? await redisMiB(redisUrl) : undefined;
  await new Promise((r) => setTimeout(r, 2000));
  const afterDrain = rssMiB(gatewayPid);

  let recoveredStatus: number | undefined;
  try {
    const res = await fetch(`${ctx.url()}${inferPath(model)}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: inferBody(text),
    });
    recoveredStatus = res.status;
    await res.arrayBuffer();
  } catch {
    recoveredStatus = 0;
  }

  const shedFloor = ctx.system
    ? await measureShedFloorOf(ctx, ctx.system.workerSettings, model, text, targetRate, connections)
    : undefined;

  const status = load.status;
  const count = (s: string) => status[s] ?? 0;
  const ok = Object.entries(status)
    .filter(([s]) => s.startsWith('2'))
    .reduce((a, [, n]) => a + n, 0);
  const other = Object.entries(status)
    .filter(([s]) => !s.startsWith('2') && s !== '503' && s !== '504')
    .reduce((a, [, n]) => a + n, 0);
  const run: SoakRun = {
    model,
    tokens,
    capacityRps,
    targetRate,
    seconds: options.soakSeconds,
    warmupSeconds: options.soakWarmupSeconds,
    queueDepth: ctx.system ? options.soakQueueDepth : undefined,
    timeoutMs: ctx.system ? options.soakTimeoutMs : undefined,
    load,
    counts: { ok, shed: count('503'), timeout: count('504'), other, socketErrors: load.socketErrors },
    acceptedLatency: load.latency,
    shedLatency: load.latencyByStatus['503'] ?? summarize([]),
    rss: {
      start: samples[0]?.mib,
      end: end ?? samples.at(-1)?.mib,
      max: maxOf(samples.map((x) => x.mib)),
      afterDrain,
      samples,
    },
    redisMiB: redisUrl ? { start: await redisStart, end: redisEnd } : undefined,
    gatewayGc: gcFirst && gcLast ? gcOverWindow(gcFirst, gcLast, options.soakSeconds) : undefined,
    recoveredStatus,
    shedFloor,
  };
  log(
    `soak: sent ${round(load.sentPerSec, 1)}/s; 200 ${ok}, 503 ${run.counts.shed}, 504 ${run.counts.timeout}, other ${other}, socket errors ${load.socketErrors}; ` +
      `accepted p99 ${round(run.acceptedLatency.p99)} ms, shed p99 ${round(run.shedLatency.p99)} ms; RSS ${run.rss.start} -> ${run.rss.end} MiB` +
      (run.redisMiB ? `; Redis ${run.redisMiB.start} -> ${run.redisMiB.end} MiB` : '') +
      (shedFloor ? `; the least server that sheds, beside the model: 503 p99 ${round(shedFloor.p99)} ms` : ''),
  );
  return run;
}

/** The soak's load against the least server that sheds, beside the model run flat out as a saturated worker (lib/shed-floor.ts). */
async function measureShedFloorOf(
  ctx: BenchContext,
  workerSettings: Record<string, string | undefined>,
  model: string,
  text: string,
  rate: number,
  connections: number,
): Promise<Summary> {
  const { options } = ctx;
  await quiesce(ctx, model);
  const worker = loadWorkerConfig({ ...workerSettings, MODEL: model });
  const burn = {
    model,
    modelDir: options.modelDir,
    text,
    batch: worker.BATCH_MAX_SIZE,
    nice: worker.WORKER_NICE,
    sessionOptions: sessionOptions(worker),
  };
  return measureShedFloor(burn, async (url) => {
    const load = await runLoad({
      url,
      path: inferPath(model),
      body: inferBody(text),
      connections,
      rate,
      instances: STAGGERED_INSTANCES,
      warmupSeconds: options.soakWarmupSeconds,
      durationSeconds: options.soakSeconds,
    });
    return load.latencyByStatus['503'] ?? summarize([]);
  });
}
