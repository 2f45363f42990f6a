import type { Encoded } from '../model/engine.js';

/** One input of one request, as the planner sees it. */
export interface Sequence<T = unknown> {
  owner: T;
  encoded: Encoded;
}

export interface PlanLimits {
  maxSize: number;
  /** Padded tokens (longest × count) one model call may hold. */
  maxPaddedTokens: number;
  /** The most rows of `length` tokens one call may hold within the worker's memory budget (memory.ts). */
  maxRows?: (length: number) => number;
}

/**
 * Splits gathered sequences into model calls. Sequences are sorted by length so each call pads
 * to a near neighbour, and a call closes when it would exceed the size cap, the padded-token
 * cap, the rows its length may have under the memory budget, or pad more than half of its tokens
 * (one long input must not pad many short ones).
 * Shortest calls come first: they finish first, so short requests are answered first.
 */
export function planBatches<T>(sequences: Sequence<T>[], limits: PlanLimits): Sequence<T>[][] {
  const sorted = [...sequences].sort((a, b) => a.encoded.ids.length - b.encoded.ids.length);
  const chunks: Sequence<T>[][] = [];
  let current: Sequence<T>[] = [];
  let realTokens = 0;
  for (const seq of sorted) {
    const length = seq.encoded.ids.length;
    const padded = (current.length + 1) * length;
    const fits =
      current.length < limits.maxSize &&
      padded <= limits.maxPaddedTokens &&
      current.length < (limits.maxRows?.(length) ?? Number.POSITIVE_INFINITY) &&
      padded <= 2 * (realTokens + length);
    if (current.length > 0 && !fits) {
      chunks.push(current);
      current = [];
      realTokens = 0;
    }
    current.push(seq);
    realTokens += length;
  }
  if (current.length) chunks.push(current);
  return chunks;
}
