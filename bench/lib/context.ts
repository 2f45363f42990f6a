import type { ReadyBody } from '@tserve/contract';
import { DISTURBED_PCT, type QuietGate } from './cpu.ts';
import type { BenchOptions } from './options.ts';
import type { BenchSystem } from './system.ts';

/** What every phase needs: the options, where the gateway is, and the processes to account. */
export interface BenchContext {
  options: BenchOptions;
  url: () => string;
  pids: () => Record<string, number | undefined>;
  /** Absent with --url: nothing can be restarted. */
  system?: BenchSystem;
  gate: QuietGate;
  log: (message: string) => void;
}

export const inferPath = (model: string) => `/models/${model}`;
export const inferBody = (text: string) => JSON.stringify({ inputs: text });

/**
 * Waits until the model's queue is empty and then for a quiet machine. autocannon abandons the
 * requests in flight when a point ends, but the server still runs them: without this, the next
 * point (or the in-process model) would share the cores with the last point's leftovers.
 */
export async function quiesce(ctx: BenchContext, model: string, maxMs = 60_000): Promise<void> {
  const until = Date.now() + maxMs;
  while (Date.now() < until) {
    try {
      const ready = (await (await fetch(`${ctx.url()}/ready`)).json()) as ReadyBody;
      if ((ready.models?.[model]?.queue_depth ?? 0) === 0) break;
    } catch {
      break;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  await ctx.gate.settle(ctx.pids());
}

/**
 * Quiesces, measures, and if something outside the bench took a share of the CPU meanwhile,
 * measures once more (while the run's retry budget lasts), keeping the less disturbed figure.
 */
export async function measureQuietly<T>(
  ctx: BenchContext,
  model: string,
  work: () => Promise<T>,
  otherOf: (t: T) => number | undefined,
): Promise<T> {
  await quiesce(ctx, model);
  let best = await work();
  const other = otherOf(best) ?? 0;
  if (other > DISTURBED_PCT && ctx.gate.takeRetry()) {
    ctx.log(`  other processes used ${other}% of a core meanwhile: measuring again`);
    await quiesce(ctx, model);
    const again = await work();
    if ((otherOf(again) ?? 0) < other) best = again;
  }
  return best;
}
