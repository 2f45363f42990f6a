/**
 * Deadline-bounded dynamic batch formation.
 *
 * Blocks for the first job; then gathers more until the batch holds `maxSize` sequences or one
 * deadline, `maxWaitMs` after the first job, has passed (the deadline is never extended). A fetch
 * round that comes back short means the queue is empty: the batch runs at once, so a lone request
 * never waits for company.
 *
 * Fetches of a round are issued together, so they share one Redis round trip instead of paying one
 * each (BullMQ's own concurrent worker fetches one job per round trip). The first round asks for a
 * few jobs only, so at low load an empty queue costs a handful of cheap calls, not `maxSize`.
 */

export interface JobSource<J> {
  /** The next waiting job; with `block`, waits for one (may still return undefined on timeout). */
  take(block: boolean): Promise<J | undefined>;
}

export interface BatchLimits {
  maxSize: number;
  maxWaitMs: number;
}

export const PROBE_ROUND = 4;

export async function gatherBatch<J>(
  source: JobSource<J>,
  limits: BatchLimits,
  sizeOf: (job: J) => number,
): Promise<J[]> {
  const first = await source.take(true);
  if (first === undefined) return [];
  const batch = [first];
  let size = sizeOf(first);
  const deadline = performance.now() + limits.maxWaitMs;
  let round = PROBE_ROUND;
  while (size < limits.maxSize && performance.now() < deadline) {
    // Each job holds at least one sequence, so this many jobs can fill the batch at most.
    const want = Math.min(round, limits.maxSize - size);
    const fetched = await Promise.all(Array.from({ length: want }, () => source.take(false)));
    let got = 0;
    for (const job of fetched) {
      if (job === undefined) continue;
      batch.push(job);
      size += sizeOf(job);
      got++;
    }
    if (got < want) break;
    round = limits.maxSize;
  }
  return batch;
}
