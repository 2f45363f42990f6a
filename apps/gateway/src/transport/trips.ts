import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import {
  ApiError,
  readResultMessage,
  type Priority,
  type QueuedRequest,
  type ReadJobOutcome,
  type ReadRequestOutcome,
} from '@tserve/contract';
import { Withdrawn, type EnqueueCoalescer, type JobSender } from './sending.js';
import { jobLost, type RedisLink } from './link.js';

/** One request's trip: to a model's workers and back. */
export interface Trip {
  model: string;
  request: QueuedRequest;
  priority: Priority;
  /** Aborted when the client goes away: a request not yet run is then dropped. */
  signal?: AbortSignal;
  /** Most sequences one job of the model carries: its workers' batch size (the coalescer's). */
  jobSequences: number;
}

/** The request could not be put in Redis (Redis down, or the breaker open). */
export class SendFailed extends Error {}

/** Where a request whose client left was dropped: before it reached Redis, or queued (the worker skips it). */
export type AbandonedAt = 'gateway' | 'queue';

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

/** What the trips work with. */
export interface TripsParts {
  /** Holds and sends requests as jobs (sending.ts): told of jobs a worker took, by its word or by their outcomes. */
  coalescer: Pick<EnqueueCoalescer, 'submit' | 'withdraw' | 'taken'>;
  /** Names a request to skip to its model's workers (sending.ts). */
  sender: Pick<JobSender, 'cancel'>;
  /** A connection of its own, subscribed to `channel`: this gateway's result channel. */
  subscriber: Redis;
  channel: string;
  /** How long a request waits before its finished job is read instead (RESULT_POLL_MS). */
  pollMs: number;
  jobs: FinishedJobs;
  /** The gateway's connections to Redis (link.ts): lost, for how long, and back. */
  link: Pick<RedisLink, 'status' | 'onBack'>;
  logger: Logger;
}

/**
 * Each request's trip: sent to its model's workers (the coalescer), and its outcome delivered back
 * to it by request id; withdrawn or cancelled where its client leaves. `send` is the one call.
 *
 * Workers publish one message per job on this gateway's own channel, holding the outcome of every
 * request in the job; on the same channel they say which of its jobs they took (for the coalescer),
 * and which jobs' outcomes were too large for a message, to be read where they are recorded. Pub/sub
 * is fire-and-forget, so a message sent while the subscriber was reconnecting would be lost:
 * requests that wait longer than one poll period read their finished job instead (the fallback read).
 */
export class Trips {
  private readonly waiters = new Map<string, Waiter>();
  private pollTimer?: NodeJS.Timeout;
  private polling = false;
  private readAllNext = false;

  /** Outcomes of abandoned requests that a worker skipped unrun, per model. */
  readonly skipped = new Map<string, number>();
  /** Requests abandoned by their clients, per model and place. */
  readonly abandoned = new Map<string, Record<AbandonedAt, number>>();

  constructor(private readonly parts: TripsParts) {}

  async start(): Promise<void> {
    // As bytes: an outcome's outputs are sliced from them, never decoded here (readResultMessage).
    this.parts.subscriber.on('messageBuffer', (_channel: Buffer, message: Buffer) => this.onMessage(message));
    await this.parts.subscriber.subscribe(this.parts.channel);
    this.pollTimer = setInterval(() => void this.poll(), this.parts.pollMs);
    this.pollTimer.unref();
    // Back from a lost Redis (a failover): outcomes published meanwhile were lost, and a job the new
    // primary never saw will have none. Every waiting job is read at once, not a poll period later.
    this.parts.link.onBack(() => void this.poll(true));
  }

  /** Requests waiting for their outcomes. */
  get pending(): number {
    return this.waiters.size;
  }

  /**
   * Sends a request to its model's workers and resolves with its outcome. Rejects with a 504
   * ApiError at its deadline, a 499 one when its client leaves, or SendFailed.
   */
  async send({ model, request, priority, signal, jobSequences }: Trip): Promise<ReadRequestOutcome> {
    // Registered before the request is sent, so even an instant answer finds its waiter. The deadline
    // may pass while the enqueue is still in flight: that rejection is awaited below.
    const answer = this.wait(request.id, request.deadline);
    answer.catch(() => this.parts.coalescer.withdraw(model, request.id, priority));
    const sent = this.parts.coalescer.submit(model, request, priority, jobSequences);
    const abandon = () => this.abandon(model, request, priority, sent);
    signal?.addEventListener('abort', abandon, { once: true });
    try {
      try {
        this.bind(request.id, { model, id: await sent });
      } catch (err) {
        if (!(err instanceof Withdrawn)) {
          this.cancel(request.id);
          throw new SendFailed(String(err));
        }
      }
      return await answer;
    } finally {
      signal?.removeEventListener('abort', abandon);
    }
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
    await this.parts.subscriber.unsubscribe(this.parts.channel).catch(() => {});
  }

  /**
   * The client left: a request not yet sent is withdrawn; a queued one is named to the model's
   * workers, which skip it if they have not run it yet. Either way nobody waits for it any more.
   */
  private abandon(model: string, request: QueuedRequest, priority: Priority, sent: Promise<string>): void {
    this.cancel(request.id, new ApiError('cancelled', 'the client closed the connection'));
    const counts = this.abandoned.get(model) ?? { gateway: 0, queue: 0 };
    this.abandoned.set(model, counts);
    if (this.parts.coalescer.withdraw(model, request.id, priority)) {
      counts.gateway++;
      return;
    }
    counts.queue++;
    this.parts.sender.cancel(model, request, sent);
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
    this.parts.coalescer.taken([job]);
  }

  /** Fails every request waiting on `job` with `error`; the coalescer hears of the job as taken, as for a finished one. */
  private failJob(job: JobRef, error: ApiError): void {
    for (const [id, waiter] of this.waiters) {
      if (waiter.job?.id !== job.id || waiter.job.model !== job.model) continue;
      clearTimeout(waiter.timer);
      this.waiters.delete(id);
      waiter.reject(error);
    }
    this.parts.coalescer.taken([job.id]);
  }

  /** Fails every request sent to Redis as a job, with `error`. */
  private failSent(error: ApiError): void {
    const jobs = new Map<string, JobRef>();
    for (const waiter of this.waiters.values())
      if (waiter.job) jobs.set(`${waiter.job.model}\n${waiter.job.id}`, waiter.job);
    if (jobs.size > 0) this.parts.logger.warn({ jobs: jobs.size }, `requests refused: ${error.message}`);
    for (const job of jobs.values()) this.failJob(job, error);
  }

  private onMessage(message: Buffer): void {
    // Skipped, not thrown inside the subscriber's event handler.
    const data = readResultMessage(message);
    if (!data) {
      this.parts.logger.warn('unreadable result message');
      return;
    }
    if (data.kind === 'taken') this.parts.coalescer.taken(data.jobs);
    else if (data.kind === 'outcome') this.deliverJob(data);
    // Too large to publish: read at once where the worker recorded it, if anyone here still waits.
    else if (data.requests.some((id) => this.waiters.get(id)?.job?.id === data.job))
      void this.read({ model: data.model, id: data.job });
    else this.parts.coalescer.taken([data.job]);
  }

  /**
   * Reads the jobs of requests that waited longer than a poll period (every one, `all`): a result
   * message may have been lost. While Redis is lost there is nothing to read; past
   * REDIS_FAILOVER_WAIT_MS, its requests get the link's 503, not their deadlines' 504.
   */
  private async poll(all = false): Promise<void> {
    const link = this.parts.link.status();
    if (link !== 'up') {
      if (link instanceof ApiError) this.failSent(link);
      return;
    }
    // A read of every job asked for while a poll is under way follows it.
    if (this.polling) return void (this.readAllNext ||= all);
    this.polling = true;
    try {
      const cutoff = all ? Infinity : Date.now() - this.parts.pollMs;
      const jobs = new Map<string, JobRef>();
      for (const waiter of this.waiters.values())
        if (waiter.job && waiter.since <= cutoff) jobs.set(`${waiter.job.model}\n${waiter.job.id}`, waiter.job);
      await Promise.all([...jobs.values()].map((job) => this.read(job)));
    } finally {
      this.polling = false;
    }
    if (this.readAllNext) {
      this.readAllNext = false;
      await this.poll(true);
    }
  }

  private async read(job: JobRef): Promise<void> {
    try {
      const finished = await this.parts.jobs.finished(job.model, job.id);
      if (finished === 'lost') this.failJob(job, jobLost());
      else if (finished) this.deliverJob(finished);
    } catch {
      // Redis unreachable: read again at the next poll, until REDIS_FAILOVER_WAIT_MS of it.
    }
  }
}
