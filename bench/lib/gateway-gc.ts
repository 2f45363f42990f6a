/**
 * The gateway's young-generation collections over a measured window, from the histogram its
 * `/metrics` exports (prom-client's `nodejs_gc_duration_seconds{kind="minor"}`). Each collection
 * stops the event loop, and every answer that falls due meanwhile waits it out. The share of the
 * window spent in them moves far less with what else the machine runs than the latency they add.
 */
import { metricValue } from '../../test/helpers/processes.ts';

export interface GcReading {
  count: number;
  seconds: number;
}

export interface GatewayGc {
  /** Young-generation collections in the window. */
  collections: number;
  meanPauseMs: number;
  /** Share of the window the event loop was stopped by them. */
  pausedShare: number;
}

/** The gateway's young-generation collections so far; undefined if its /metrics cannot be read. */
export async function readGatewayGc(url: string): Promise<GcReading | undefined> {
  try {
    const res = await fetch(`${url}/metrics`);
    const text = await res.text();
    if (!res.ok) return undefined;
    const labels = { kind: 'minor' };
    return { count: metricValue(text, 'nodejs_gc_duration_seconds_count', labels), seconds: metricValue(text, 'nodejs_gc_duration_seconds_sum', labels) };
  } catch {
    return undefined;
  }
}

export function gcOverWindow(start: GcReading, end: GcReading, windowSeconds: number): GatewayGc {
  const collections = end.count - start.count;
  const seconds = end.seconds - start.seconds;
  return { collections, meanPauseMs: collections > 0 ? (seconds * 1000) / collections : 0, pausedShare: windowSeconds > 0 ? seconds / windowSeconds : 0 };
}
