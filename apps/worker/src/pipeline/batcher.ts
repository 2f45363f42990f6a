/**
 * Deadline-bounded dynamic batch formation.
 *
 * Waits for the first job; then gathers more until the batch holds `maxSize` sequences or one
 * deadline, `maxWaitMs` after the first job, has passed (the deadline is never extended). The source
 * is asked how many jobs wait before any is fetched (the intake knows that from the work notices
 * it heard, without asking Redis), so an empty queue costs no fetch (a fetch is one of BullMQ's
 * scripts, about ten commands inside Redis); an empty queue also ends the gathering at once, so a
 * lone request never waits for company. The jobs of one round are fetched together, in one round
 * trip.
 */

export interface JobSource<J> {
  /** Waits for the next job (may still return undefined, e.g. when the source is closing). */
  next(): Promise<J | undefined>;
  /** How many jobs are waiting now. */
  waiting(): Promise<number>;
  /** Up to `count` waiting jobs, fetched together. */
  take(count: number): Promise<J[]>;
}

export interface BatchLimits {
  maxSize: number;
  maxWaitMs: number;
}

export async function gatherBatch<J>(
  source: JobSource<J>,
  limits: BatchLimits,
  sizeOf: (job: J) => number,
): Promise<J[]> {
  const first = await source.next();
  if (first === undefined) return [];
  const batch: J[] = [first];
  const deadline = performance.now() + limits.maxWaitMs;
  let size = sizeOf(first);
  while (size < limits.maxSize && performance.now() < deadline) {
    const more = await topUp(source, limits.maxSize - size, sizeOf(first));
    if (more.length === 0) break;
    batch.push(...more);
    for (const job of more) size += sizeOf(job);
  }
  return batch;
}

/**
 * Jobs waiting now, without blocking, about as many as fill `room` sequences. Sizes are known only
 * after the fetch: a gateway coalesces requests into jobs of similar size under steady load, so the
 * size of a job just seen is the guess (a batch may overshoot; the planner splits its model calls).
 */
export async function topUp<J>(source: JobSource<J>, room: number, typicalJobSize: number): Promise<J[]> {
  if (room <= 0) return [];
  const waiting = await source.waiting();
  if (waiting === 0) return [];
  return source.take(Math.min(waiting, Math.max(1, Math.floor(room / Math.max(1, typicalJobSize)))));
}
