import type { Job } from 'bullmq';
import type { JobData, QueuedRequest } from '@tserve/contract';

/** A BullMQ job this worker took, read: its requests, and where their outcomes go. */
export interface Work {
  /** The job's id: its first request's. */
  id: string;
  requests: QueuedRequest[];
  /** Pub/sub channel of the gateway waiting for its requests. */
  replyTo: string;
  /** The gateway holds later requests back until told this job was taken (`JobsTaken`). */
  tellTaken: boolean;
  /** Bulk work, which interactive work may overtake. */
  bulk: boolean;
  /** How long an outcome recorded apart from the job is kept for the gateway's fallback read (ms). */
  keepMs: number;
  /**
   * The BullMQ job, whose lock is renewed and which is completed with the outcomes, once this
   * worker holds it. Work started from a notice's copy ahead of its fetch (Intake) may find that
   * the fetch did not bring it: undefined, and its outcomes are dropped (the job runs when fetched).
   */
  job: Promise<Job<JobData> | undefined>;
}
