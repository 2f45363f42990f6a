/**
 * Events BullMQ keeps in each queue's event stream; its default is 10,000. Nothing here reads them
 * (results travel over pub/sub), but each job's "completed" event holds the job's whole return value:
 * with embeddings that is large for a job of many requests, and at the default one CPU worker's
 * stream soon held a large share of Redis's memory (bench/HISTORY.md, figures moved from code).
 */
export const EVENTS_KEPT = 100;

/** What every process that creates a model's Queue gives it, so that none writes back BullMQ's default cap. */
export const QUEUE_STREAMS = { events: { maxLen: EVENTS_KEPT } };

/** Completed jobs kept at most, whatever their age: a job holds the outcomes of all its requests. */
const COMPLETED_KEPT = 1000;

/**
 * How long stored outcomes are kept, given the gateway's fallback poll period: they serve only that
 * poll (for a result message that was lost), which reads them within two periods of their
 * completion, so five periods and at least ten seconds.
 */
export function outcomesKeptMs(resultPollMs: number): number {
  return Math.max(10, Math.ceil((5 * resultPollMs) / 1000)) * 1000;
}

/** How long a failed job (its requests' inputs among its data) is kept, for the dashboard. */
export const FAILED_KEPT_MS = 600_000;

/**
 * Options of the jobs a gateway adds. A completed job's age (outcomesKeptMs) is bounded by the
 * gateway's retention sweep (transport/retention.ts), which must run anyway for when traffic stops,
 * and not here as well: BullMQ checking an age besides the count at every completion makes that
 * completion cost Redis measurably more (bench/HISTORY.md).
 */
export const JOB_OPTIONS = {
  // A job holds requests that are not retried after they failed (their clients got the error
  // already); a job whose worker died is recovered by the stalled-job checker instead.
  attempts: 1,
  removeOnComplete: { count: COMPLETED_KEPT },
  // Failures stay longer, for the dashboard; they are few and hold no outcomes.
  removeOnFail: { age: FAILED_KEPT_MS / 1000, count: 10000 },
};
