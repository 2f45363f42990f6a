/**
 * The gateway's garbage collections over a measured window, from the histogram its `/metrics`
 * exports (prom-client's `nodejs_gc_duration_seconds`, by kind). Each pause stops the event loop,
 * and every answer that falls due meanwhile waits it out. The share of the window spent in them
 * moves far less with what else the machine runs than the latency they add.
 */
import { metricValue } from '../../test/helpers/processes.ts';

/**
 * The kinds that pause the event loop: young-generation collections (minor), the final pause of a
 * full mark-compact collection (major), and the steps of its incremental marking, which run on the
 * main thread between turns. A kind that has not yet happened reads zero.
 */
const GC_KINDS = ['minor', 'major', 'incremental'] as const;
type GcKind = (typeof GC_KINDS)[number];

interface GcTotals {
  count: number;
  seconds: number;
}

/** Every kind's collections so far. */
export type GcReading = Record<GcKind, GcTotals>;

export interface GcWindow {
  /** Collections of this kind in the window. */
  collections: number;
  meanPauseMs: number;
  /** Share of the window the event loop was stopped by them. */
  pausedShare: number;
}

export type GatewayGc = Record<GcKind, GcWindow>;

/** The gateway's collections so far; undefined if its /metrics cannot be read. */
export async function readGatewayGc(url: string): Promise<GcReading | undefined> {
  try {
    const res = await fetch(`${url}/metrics`);
    const text = await res.text();
    if (!res.ok) return undefined;
    const totals = (kind: GcKind): GcTotals => ({
      count: metricValue(text, 'nodejs_gc_duration_seconds_count', { kind }),
      seconds: metricValue(text, 'nodejs_gc_duration_seconds_sum', { kind }),
    });
    return Object.fromEntries(GC_KINDS.map((kind) => [kind, totals(kind)])) as GcReading;
  } catch {
    return undefined;
  }
}

function kindOverWindow(start: GcTotals, end: GcTotals, windowSeconds: number): GcWindow {
  const collections = end.count - start.count;
  const seconds = end.seconds - start.seconds;
  return {
    collections,
    meanPauseMs: collections > 0 ? (seconds * 1000) / collections : 0,
    pausedShare: windowSeconds > 0 ? seconds / windowSeconds : 0,
  };
}

export function gcOverWindow(start: GcReading, end: GcReading, windowSeconds: number): GatewayGc {
  return Object.fromEntries(
    GC_KINDS.map((kind) => [kind, kindOverWindow(start[kind], end[kind], windowSeconds)]),
  ) as GatewayGc;
}
