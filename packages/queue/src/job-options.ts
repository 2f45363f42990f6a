import type { JobsOptions } from 'bullmq';

export const DEFAULT_JOB_OPTIONS: JobsOptions = {
  // A job is one request: it is not retried after it failed (its client got the error already);
  // a job whose worker died is recovered by the stalled-job checker instead.
  attempts: 1,
  // Results travel over pub/sub; the stored copy only serves the gateway's fallback read, briefly.
  removeOnComplete: { age: 60, count: 10000 },
  removeOnFail: { age: 600, count: 10000 },
};
