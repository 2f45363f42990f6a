import type { Job } from 'bullmq';
import { sequenceCount, type DirectEntry, type InferenceJobData, type LoneDirectEntry, type QueuedRequest } from '@tserve/contract';

/** A unit of work the consumer fetched: a BullMQ job or a direct entry, each of one or more requests. */
export type Work = WorkCommon &
  (
    | {
        /** The BullMQ job, whose lock is renewed and which is completed with the outcomes. */
        job: Job<InferenceJobData>;
        keepMs?: undefined;
      }
    | {
        job?: undefined;
        /** How long the direct entry's outcomes are kept for the gateway's fallback read (ms). */
        keepMs: number;
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
}

export function workOfJob(job: Job<InferenceJobData>): Work {
  return {
    id: job.id!,
    requests: job.data.requests,
    replyTo: job.data.replyTo,
    tellTaken: job.data.tellTaken === true,
    bulk: (job.opts.priority ?? 0) > 0,
    job,
  };
}

/** The work of a direct entry: no BullMQ job, and how long its outcomes are kept. */
export type DirectWork = Extract<Work, { keepMs: number }>;

/** Gateways send only interactive requests directly; the lone form's gateways always wanted to hear that an entry was taken. */
export function workOfDirect(entry: DirectEntry | LoneDirectEntry): DirectWork {
  const { id, requests, tellTaken } = 'request' in entry ? { id: entry.request.id, requests: [entry.request], tellTaken: true } : entry;
  return { id, requests, replyTo: entry.replyTo, tellTaken: tellTaken !== false, bulk: false, keepMs: entry.keepMs };
}

export const sequencesOf = (work: Work) => work.requests.reduce((n, r) => n + sequenceCount(r), 0);
