import { quiesce, inferBody, type BenchContext } from './context.ts';
import { runLoad } from './load.ts';
import { round } from './stats.ts';
import type { GatewayCost } from './types.ts';

/**
 * The gateway's own cost per request, with no model in the way: closed-loop requests for a model
 * nobody serves, answered 404 after the same parsing and validation as a shed request. Its CPU
 * per request bounds how fast the gateway can shed load, and is part of every request's latency.
 */
export async function measureGatewayCost(ctx: BenchContext, model: string, text: string): Promise<GatewayCost> {
  await quiesce(ctx, model);
  const concurrency = 16;
  const load = await runLoad({
    url: ctx.url(),
    path: '/models/bench/not-served',
    body: inferBody(text),
    connections: concurrency,
    warmupSeconds: ctx.options.warmupSeconds,
    durationSeconds: Math.min(5, ctx.options.durationSeconds),
    pids: ctx.pids(),
  });
  const answered = Object.values(load.status).reduce((a, n) => a + n, 0) / load.seconds;
  const all = Object.values(load.latencyByStatus)[0];
  const cpuPct = load.cpu?.procs.gateway ?? NaN;
  const cost: GatewayCost = {
    concurrency,
    status: Object.keys(load.status).join(','),
    perSec: answered,
    p50: all?.p50 ?? NaN,
    p99: all?.p99 ?? NaN,
    gatewayCpuPct: cpuPct,
    cpuMsPerRequest: ((cpuPct / 100) * 1000) / answered,
  };
  ctx.log(
    `gateway alone (404 for an unserved model, c=${concurrency}): ${round(answered, 0)}/s, p50 ${round(cost.p50)} ms, gateway cpu ${cpuPct}% = ${round(cost.cpuMsPerRequest, 3)} ms per request`,
  );
  return cost;
}
