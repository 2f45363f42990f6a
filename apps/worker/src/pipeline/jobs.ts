import type { QueuedRequest, RequestOutcome } from '@tserve/contract';

/**
 * The jobs a worker takes, as the pipeline sees them and what it needs of them. The pipeline
 * declares them and the transport implements them (transport/taken-jobs.ts); startup/ hands the one
 * to the other, so that no import runs between the two rooms.
 */

/** A job the worker took: its requests, and their class. */
export interface Job {
  /** The job's id: its first request's. */
  id: string;
  requests: QueuedRequest[];
  /** Bulk work, which interactive work may overtake. */
  bulk: boolean;
}

/** Where model batches are gathered from: jobs, waited for one at a time or taken several together. */
export interface JobSource<J> {
  /** Waits for the next job (may still return undefined, e.g. when the source is closing). */
  next(): Promise<J | undefined>;
  /** How many jobs are waiting now. */
  waiting(): Promise<number>;
  /** Up to `count` waiting jobs, fetched together. */
  take(count: number): Promise<J[]>;
}

/** Where the runner hands each request's outcome, once per request. */
export interface OutcomeSink {
  accept(request: QueuedRequest, outcome: RequestOutcome): void;
}

/**
 * The one owner of the jobs a worker takes, from taking to settling, as BullMQ's lock manager owns
 * its worker's locks: it takes jobs from the model's queue and keeps their locks until each is
 * settled, once every one of its requests has an outcome; and it tells the gateways that asked
 * when their jobs are taken.
 */
export interface TakenJobs extends JobSource<Job>, OutcomeSink {
  /** Starts taking jobs. */
  start(): void;
  /** Interactive jobs waiting now, which may go ahead of bulk work; 0 when none were announced. */
  interactiveWaiting(): Promise<number>;
  /**
   * Tells each gateway that asked (a job's `tellTaken`), in one message, which of its jobs taken
   * since the last call are taken: the gateway then sends what it held back behind them.
   */
  sendTaken(): void;
  /** Stops taking jobs: the settlements under way finish, then the queue is let go. */
  close(): Promise<void>;
}
