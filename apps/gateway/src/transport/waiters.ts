import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import {
  ApiError,
  readMessage,
  resultMessageSchema,
  type ReadJobOutcome,
  type ReadRequestOutcome,
} from '@tserve/contract';

/** A BullMQ job that carries a waiting request: the fallback read looks there. */
interface JobRef {
  model: string;
  id: string;
}

interface Waiter {
  since: number;
  /** The job that carries the request, once it is in Redis. */
  job?: JobRef;
  resolve: (outcome: ReadRequestOutcome) => void;
  reject: (err: ApiError) => void;
  timer: NodeJS.Timeout;
}

/** Where finished jobs are read (queues.ts). */
export interface FinishedJobs {
  /** A finished job's outcomes, read where BullMQ or the worker recorded them; undefined while there are none; 'lost' once the job is gone. */
  finished(model: string, jobId: string): Promise<ReadJobOutcome | 'lost' | undefined>;
}

/** What the waiters work with. */
export interface WaitersParts {
  /** A connection of its own, subscribed to `channel`: this gateway's result channel. */
  subscriber: Redis;
  channel: string;
  /** How long a request waits before its finished job is read instead (RESULT_POLL_MS). */
  pollMs: number;
  jobs: FinishedJobs;
  logger: Logger;
  /** Told of jobs a worker took, by its word or by their outcomes (the EnqueueCoalescer). */
  coalescer: { taken(jobIds: string[]): void };
}

/** A request whose job Redis no longer holds: nothing will answer it, so it is answered now, not at its deadline. */
const jobLost = () =>
  new ApiError(
    'unavailable',
    'the request was lost with its job: Redis no longer holds it (restarted empty, or evicted it under maxmemory); retry',
    1,
  );

/**
 * Delivers each request's outcome to the request waiting for it, by request id.
 *
 * Workers publish one message per job on this gateway's own channel, holding the outcome of every
 * request in the job; on the same channel they say which of its jobs they took (for the coalescer),
 * and which jobs' outcomes were too large for a message, to be read where they are recorded. Pub/sub
 * is fire-and-forget, so a message sent while the subscriber was reconnecting would be lost:
 * requests that wait longer than one poll period read their finished job instead (the fallback read).
 */
export class OutcomeWaiters {
  private readonly waiters = new Map<string, Waiter>();
  private pollTimer?: NodeJS.Timeout;
  private polling = false;

  /** Outcomes of abandoned requests that a worker skipped unrun, per model. */
  readonly skipped = new Map<string, number>();

  readonly channel: string;
  private readonly subscriber: Redis;
  private readonly pollMs: number;
  private readonly jobs: FinishedJobs;
  private readonly logger: Logger;
  private readonly coalescer: WaitersParts['coalescer'];

  constructor(parts: WaitersParts) {
    this.channel = parts.channel;
    this.subscriber = parts.subscriber;
    this.pollMs = parts.pollMs;
    this.jobs = parts.jobs;
    this.logger = parts.logger;
    this.coalescer = parts.coalescer;
  }

  async start(): Promise<void> {
    this.subscriber.on('message', (_channel: string, message: string) => this.onMessage(message));
    await this.subscriber.subscribe(this.channel);
    this.pollTimer = setInterval(() => void this.poll(), this.pollMs);
    this.pollTimer.unref();
  }

  get pending(): number {
    return this.waiters.size;
  }

  /** Resolves with the request's outcome, or rejects with a 504 when `deadline` (epoch ms) passes first. */
  wait(requestId: string, deadline: number): Promise<ReadRequestOutcome> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => {
          this.waiters.delete(requestId);
          // A request still queued is dropped unrun by the worker, which checks every deadline.
          reject(new ApiError('timeout', 'the request deadline passed before the model answered'));
        },
        Math.max(0, deadline - Date.now()),
      );
      this.waiters.set(requestId, { since: Date.now(), resolve, reject, timer });
    });
  }

  /** Names the job that carries a waiting request, for the fallback read. */
  bind(requestId: string, job: JobRef): void {
    const waiter = this.waiters.get(requestId);
    if (waiter) waiter.job = job;
  }

  /** Releases a waiter (its enqueue failed, or its client left); it rejects with `error` if given. */
  cancel(requestId: string, error?: ApiError): void {
    const waiter = this.waiters.get(requestId);
    if (!waiter) return;
    clearTimeout(waiter.timer);
    this.waiters.delete(requestId);
    if (error) waiter.reject(error);
  }

  async stop(): Promise<void> {
    clearInterval(this.pollTimer);
    await this.subscriber.unsubscribe(this.channel).catch(() => {});
  }

  private deliver(model: string, outcome: ReadRequestOutcome): void {
    const waiter = this.waiters.get(outcome.id);
    if (!waiter) {
      // Answered already (by the fallback read, or a 504), or its client left.
      if (!outcome.ok && outcome.error.error_type === 'cancelled')
        this.skipped.set(model, (this.skipped.get(model) ?? 0) + 1);
      return;
    }
    clearTimeout(waiter.timer);
    this.waiters.delete(outcome.id);
    waiter.resolve(outcome);
  }

  /**
   * Delivers a finished job's outcomes, and tells the coalescer it was taken: the worker's word that
   * it took the job travels apart from the outcome and may be lost alone (a subscriber reconnecting
   * between the two), and until the coalescer hears it, what arrives for the model waits a poll
   * period behind a job already answered.
   */
  private deliverJob({ job, model, outcomes }: ReadJobOutcome): void {
    for (const outcome of outcomes) this.deliver(model, outcome);
    this.coalescer.taken([job]);
  }

  /** Fails every request waiting on `job` with `error`; the coalescer hears of the job as taken, as for a finished one. */
  private failJob(job: JobRef, error: ApiError): void {
    for (const [id, waiter] of this.waiters) {
      if (waiter.job?.id !== job.id || waiter.job.model !== job.model) continue;
      clearTimeout(waiter.timer);
      this.waiters.delete(id);
      waiter.reject(error);
    }
    this.coalescer.taken([job.id]);
  }

  private onMessage(text: string): void {
    // Skipped, not thrown inside the subscriber's event handler.
    const data = readMessage(resultMessageSchema, text);
    if (!data) {
      this.logger.warn('unreadable result message');
      return;
    }
    if (data.kind === 'taken') this.coalescer.taken(data.jobs);
    else if (data.kind === 'outcome') this.deliverJob(data);
    // Too large to publish: read at once where the worker recorded it, if anyone here still waits.
    else if (data.requests.some((id) => this.waiters.get(id)?.job?.id === data.job))
      void this.read({ model: data.model, id: data.job });
    else this.coalescer.taken([data.job]);
  }

  /** Reads the jobs of requests that waited longer than a poll period: a result message may have been lost. */
  private async poll(): Promise<void> {
    if (this.polling) return;
    this.polling = true;
    try {
      const cutoff = Date.now() - this.pollMs;
      const jobs = new Map<string, JobRef>();
      for (const waiter of this.waiters.values())
        if (waiter.job && waiter.since <= cutoff) jobs.set(`${waiter.job.model}\n${waiter.job.id}`, waiter.job);
      await Promise.all([...jobs.values()].map((job) => this.read(job)));
    } finally {
      this.polling = false;
    }
  }

  private async read(job: JobRef): Promise<void> {
    try {
      const finished = await this.jobs.finished(job.model, job.id);
      if (finished === 'lost') this.failJob(job, jobLost());
      else if (finished) this.deliverJob(finished);
    } catch {
      // Redis unreachable: read again at the next poll; the requests wait until their deadline.
    }
  }
}
