import type { Job } from 'bullmq';
import { SETTINGS } from '@tserve/config';
import { outcomesKeptMs } from '@tserve/queue';
import { sequenceCount, type DirectEntry, type InferenceJobData, type LoneDirectEntry, type QueuedRequest } from '@tserve/contract';

/** A unit of work the consumer fetched: a BullMQ job or a direct entry, each of one or more requests. */
export type Work = WorkCommon &
  (
    | {
        /** The BullMQ job, whose lock is renewed and which is completed with the outcomes. */
        job: Job<InferenceJobData>;
      }
    | {
        job?: undefined;
      }
  );

interface WorkCommon {
  /** The job's id, or the direct entry's. */
  id: string;
  requests: QueuedRequest[];
  /** Pub/sub channel of the gateway waiting for its requests. */
  replyTo: string;
  /** The gateway holds requests back until told this was taken (`JobsTaken`). */
  tellTaken: boolean;
  /** Batch-class work, which interactive work may overtake. */
  bulk: boolean;
  /** How long its outcomes are kept for the gateway's fallback read where the worker records them (ms). */
  keepMs: number;
}

/** Older gateways do not say how long a job's outcomes are kept: as long as their default poll period (RESULT_POLL_MS) asks. */
const OLDER_GATEWAYS_KEEP_MS = outcomesKeptMs(SETTINGS.gateway.RESULT_POLL_MS.parse(undefined));

export function workOfJob(job: Job<InferenceJobData>): Work {
  return {
    id: job.id!,
    requests: job.data.requests,
    replyTo: job.data.replyTo,
    tellTaken: job.data.tellTaken === true,
    bulk: (job.opts.priority ?? 0) > 0,
    keepMs: job.data.keepMs ?? OLDER_GATEWAYS_KEEP_MS,
    job,
  };
}

/** The work of a direct entry: no BullMQ job, and how long its outcomes are kept. */
export type DirectWork = Extract<Work, { job?: undefined }>;

/** Gateways send only interactive requests directly; the lone form's gateways always wanted to hear that an entry was taken. */
export function workOfDirect(entry: DirectEntry | LoneDirectEntry): DirectWork {
  const { id, requests, tellTaken } = 'request' in entry ? { id: entry.request.id, requests: [entry.request], tellTaken: true } : entry;
  return { id, requests, replyTo: entry.replyTo, tellTaken: tellTaken !== false, bulk: false, keepMs: entry.keepMs };
}

export const sequencesOf = (work: Work) => work.requests.reduce((n, r) => n + sequenceCount(r), 0);
