import { Job, type Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import {
  ApiError,
  decodeJobFailure,
  decodeRecordedOutcome,
  type JobOutcome,
  type JobRecorded,
  type JobsTaken,
  type QueuedRequest,
  type ReadRequestOutcome,
  type RequestOutcome,
} from '@tserve/contract';
import type { DirectRequests, DirectTicket } from './direct-requests.js';

/** A BullMQ job that carries a request. */
interface JobRef {
  queue: Queue;
  id: string;
}

/** Sends the requests of a direct entry that nobody holds as a job instead (see DirectRequests). */
type Requeue = (ticket: DirectTicket, requests: QueuedRequest[]) => Promise<JobRef>;

interface Waiter {
  since: number;
  /** Where the request went once it is in Redis, a job or a direct entry: the fallback poll reads it there. */
  job?: JobRef;
  direct?: DirectTicket;
  resolve: (outcome: ReadRequestOutcome) => void;
  reject: (err: ApiError) => void;
  timer: NodeJS.Timeout;
}

/**
 * Delivers each request's outcome to the request waiting for it, by request id.
 *
 * Workers publish one message per job on this gateway instance's own channel, holding the outcome
 * of every request in the job (no shared event stream to scan, nothing to trim); on the same
 * channel they say which of its jobs they took from the queue, for the coalescer, and which jobs'
 * outcomes were too large for a message, to be read where they are recorded. Pub/sub is
 * fire-and-forget, so a message sent while the subscriber was reconnecting would be lost: requests
 * that wait longer than one poll period also read their job's stored return value.
 */
export class ResultWaiters {
  private readonly waiters = new Map<string, Waiter>();
  private pollTimer?: NodeJS.Timeout;
  private polling = false;

  constructor(
    private readonly subscriber: Redis,
    readonly channel: string,
    private readonly pollMs: number,
    private readonly logger: Logger,
    /** Told of outcomes nobody waits for any more (the client left, or was answered 504). */
    private readonly onUnclaimed: (model: string, outcome: RequestOutcome) => void,
    /** Told of jobs a worker took from the queue, by its word or by their outcomes. */
    private readonly onTaken: (jobIds: string[]) => void,
    /** Where direct entries are looked up, and how one nobody holds is sent again. */
    private readonly direct: { requests: DirectRequests; requeue: Requeue; onRequeued: (model: string, requests: number) => void },
    /** A job's outcome recorded apart from it (JobRecorded; decodeRecordedOutcome reads it), null once it expired. */
    private readonly recordedOutcome: (jobId: string) => Promise<Buffer | null>,
  ) {}

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

  /** Names the job that carries a waiting request, for the fallback poll. */
  bindJob(requestId: string, queue: Queue, jobId: string): void {
    const waiter = this.waiters.get(requestId);
    if (waiter) waiter.job = { queue, id: jobId };
  }

  /** Names the direct entry a waiting request went in, for the fallback poll. */
  bindDirect(requestId: string, ticket: DirectTicket): void {
    const waiter = this.waiters.get(requestId);
    if (waiter) waiter.direct = ticket;
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
      // Answered already (by the poll, or a 504), or its client left.
      this.onUnclaimed(model, outcome);
      return;
    }
    clearTimeout(waiter.timer);
    this.waiters.delete(outcome.id);
    waiter.resolve(outcome);
  }

  private onMessage(message: string): void {
    // Either shape of message a worker sends; one of another version's shape is skipped, not thrown
    // inside the subscriber's event handler.
    let parsed: Partial<JobOutcome & JobsTaken & JobRecorded> | null;
    try {
      parsed = JSON.parse(message) as Partial<JobOutcome & JobsTaken & JobRecorded> | null;
    } catch (err) {
      this.logger.warn({ err: String(err) }, 'unreadable result message');
      return;
    }
    if (Array.isArray(parsed?.taken)) this.onTaken(parsed.taken);
    else if (Array.isArray(parsed?.outcomes)) this.deliverJob(parsed.job, parsed.model ?? '', parsed.outcomes);
    else if (typeof parsed?.recorded === 'string' && Array.isArray(parsed.requests)) void this.readRecorded(parsed.recorded, parsed.requests);
    else this.logger.warn('unreadable result message');
  }

  /** Reads a job's outcomes, too large to be published, where the worker recorded them (JobRecorded). */
  private async readRecorded(jobId: string, requestIds: string[]): Promise<void> {
    const waiter = requestIds.map((id) => this.waiters.get(id)).find((w) => w?.job?.id === jobId || w?.direct?.id === jobId);
    // Its clients were answered or left; or, never seen, none is bound to where it went yet, and the poll reads it.
    if (!waiter) this.onTaken([jobId]);
    else if (waiter.job) await this.readJob(waiter.job.queue, jobId);
    else if (waiter.direct) await this.readDirect(waiter.direct);
  }

  /**
   * Delivers a finished job's outcomes, and tells the coalescer it was taken: the worker's word
   * that it took the job travels apart from the outcome and may be lost alone (a subscriber
   * reconnecting between the two), and until the coalescer hears it, what arrives for the model
   * waits `RESULT_POLL_MS` behind a job already answered.
   */
  private deliverJob(jobId: string | undefined, model: string, outcomes: ReadRequestOutcome[]): void {
    for (const outcome of outcomes) this.deliver(model, outcome);
    if (typeof jobId === 'string') this.onTaken([jobId]);
  }

  private async poll(): Promise<void> {
    if (this.polling) return;
    this.polling = true;
    try {
      const cutoff = Date.now() - this.pollMs;
      const jobs = new Map<string, JobRef>();
      const directs = new Set<DirectTicket>();
      for (const waiter of this.waiters.values()) {
        if (waiter.since > cutoff) continue;
        if (waiter.job) jobs.set(`${waiter.job.queue.name}/${waiter.job.id}`, waiter.job);
        else if (waiter.direct) directs.add(waiter.direct);
      }
      await Promise.all([...[...jobs.values()].map((job) => this.readJob(job.queue, job.id)), ...[...directs].map((ticket) => this.readDirect(ticket))]);
    } finally {
      this.polling = false;
    }
  }

  /** Delivers a direct entry's stored outcomes, or sends its requests still waiting as a job if nobody holds it. */
  private async readDirect(ticket: DirectTicket): Promise<void> {
    try {
      const fate = await this.direct.requests.fate(ticket);
      if ('outcome' in fate) {
        this.deliverJob(ticket.id, fate.outcome.model, fate.outcome.outcomes);
      } else if ('orphaned' in fate) {
        // Those whose clients left or were answered 504 meanwhile are not sent again.
        const waiting = ticket.requests.filter((r) => this.waiters.get(r.id)?.direct === ticket);
        if (waiting.length === 0) return;
        // Bound to the job only once it is there: if this fails, the next poll finds the ticket unaccounted for and tries again.
        const job = await this.direct.requeue(ticket, waiting);
        for (const request of waiting) {
          const waiter = this.waiters.get(request.id);
          if (waiter?.direct !== ticket) continue;
          waiter.job = job;
          waiter.direct = undefined;
        }
        this.direct.onRequeued(ticket.model, waiting.length);
        const line = { entry: ticket.id, requests: waiting.length, model: ticket.model };
        // Busy workers leave an entry untaken for a period under load, as designed; the others are faults.
        if (fate.orphaned === 'not taken') this.logger.info(line, 'direct entry not taken by a worker within a poll period; sent as a job');
        else if (fate.orphaned === 'holder gone') this.logger.warn(line, 'direct entry held by a worker that is gone; sent again as a job');
        else this.logger.warn(line, 'direct entry found nowhere (its worker died as it took it, or Redis restarted empty); sent again as a job');
      }
    } catch {
      // Redis unreachable: looked at again at the next poll; the requests wait until their deadline.
    }
  }

  /** Delivers what a finished job holds: its outcomes, or its failure to each of its requests. */
  private async readJob(queue: Queue, jobId: string): Promise<void> {
    try {
      const job = await Job.fromId(queue, jobId);
      if (!job?.finishedOn) return;
      const value = job.returnvalue as JobOutcome | JobRecorded | null;
      const model = value?.model ?? queue.name;
      if (value && 'recorded' in value) {
        const recorded = await this.recordedOutcome(jobId);
        // Gone only once the job is too: its requests wait until their deadline.
        if (recorded !== null) this.deliverJob(jobId, model, decodeRecordedOutcome(recorded).outcomes);
      } else if (value) {
        this.deliverJob(jobId, model, value.outcomes);
      } else if (job.failedReason) {
        const error = decodeJobFailure(job.failedReason);
        const requests = (job.data as { requests?: Array<{ id: string }> }).requests ?? [];
        this.deliverJob(
          jobId,
          model,
          requests.filter((request) => this.waiters.has(request.id)).map((request) => ({ id: request.id, ok: false, error })),
        );
      }
    } catch {
      // Redis unreachable: the request keeps waiting until its deadline.
    }
  }
}
