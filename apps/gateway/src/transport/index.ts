import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { ApiError, type Priority, type QueuedRequest, type ReadRequestOutcome } from '@tserve/contract';
import { FAILED_KEPT_MS, keys, outcomesKeptMs } from '@tserve/queue';
import { EnqueueCoalescer, JobSender, Withdrawn } from './sending.js';
import { QueueSet } from './queues.js';
import { OutcomeWaiters } from './waiters.js';
import { RetentionSweep } from './retention.js';

/** Where a request whose client left was dropped: before it reached Redis, or queued (the worker skips it). */
export type AbandonedAt = 'gateway' | 'queue';

/** One request's trip: to a model's workers and back. */
export interface Trip {
  model: string;
  request: QueuedRequest;
  priority: Priority;
  /** Aborted when the client goes away: a request not yet run is then dropped. */
  signal?: AbortSignal;
}

/** The request could not be put in Redis (Redis down, or the breaker open). */
export class SendFailed extends Error {}

export interface TransportOptions {
  prefix: string;
  /** This gateway's own result channel is named after it. */
  gatewayId: string;
  /** Fallback read period (RESULT_POLL_MS); also sets how long finished jobs are kept. */
  resultPollMs: number;
  /** How long a job may wait unrun before every request in it is past its deadline (REQUEST_TIMEOUT_MS). */
  unrunMs: number;
}

export interface TransportParts {
  /** The gateway's fail-fast command connection. */
  redis: Redis;
  /** A connection of its own for the result channel. */
  subscriber: Redis;
  /**
   * The served models (the registry): most sequences one job carries for a model, its workers' batch
   * size; and the models served now, whose queues are swept too where this gateway has sent nothing
   * yet (started after traffic stopped).
   */
  models: { batchSize(model: string): number; served(): Array<{ id: string }> };
  /** This gateway's requests outstanding per model (the queue depth). */
  depth: { own(model: string): number };
  /** Every Redis write of a request goes through the breaker, which fails fast while Redis is down. */
  breaker: { guard<T>(call: () => Promise<T>): Promise<T> };
  logger: Logger;
}

/**
 * The gateway's whole side of the link to the workers, through BullMQ: coalescing requests into
 * jobs, enqueueing them, waiting for each request's outcome (published, or read from the finished
 * job), and withdrawing or cancelling a request whose client left. `send` is the one call for a trip.
 * docs/protocol.md describes the messages and keys.
 */
export class Transport {
  private readonly queues: QueueSet;
  private readonly sender: JobSender;
  private readonly waiters: OutcomeWaiters;
  private readonly coalescer: EnqueueCoalescer;
  private readonly retention: RetentionSweep;
  /** How long a completed job is kept; the sweep runs every half of it. */
  private readonly completedMs: number;
  /** Requests abandoned by their clients, per model and place. */
  readonly abandoned = new Map<string, Record<AbandonedAt, number>>();

  constructor(parts: TransportParts, options: TransportOptions) {
    this.queues = new QueueSet(parts.redis, options.prefix, options.resultPollMs);
    const channel = keys.results(options.prefix, options.gatewayId);
    this.completedMs = outcomesKeptMs(options.resultPollMs);
    this.sender = new JobSender({
      redis: parts.redis,
      queues: this.queues,
      prefix: options.prefix,
      replyTo: channel,
      keepMs: this.completedMs,
      breaker: parts.breaker,
    });
    this.coalescer = new EnqueueCoalescer({
      sender: this.sender,
      models: parts.models,
      depth: parts.depth,
      // A worker's word that it took a job is lost only as a result message is: the same period covers both.
      graceMs: options.resultPollMs,
    });
    this.waiters = new OutcomeWaiters({
      subscriber: parts.subscriber,
      channel,
      pollMs: options.resultPollMs,
      jobs: this.queues,
      logger: parts.logger,
      coalescer: this.coalescer,
    });
    this.retention = new RetentionSweep(
      () => [...new Set([...parts.models.served().map((m) => this.queues.get(m.id)), ...this.queues.all()])],
      { completedMs: this.completedMs, failedMs: FAILED_KEPT_MS, unrunMs: options.unrunMs },
      parts.logger,
    );
  }

  async start(): Promise<void> {
    await this.waiters.start();
    // Every half keep period: a finished job is gone within one and a half of them (docs/protocol.md).
    this.retention.start(this.completedMs / 2);
  }

  /**
   * Sends a request to its model's workers and resolves with its outcome. Rejects with a 504
   * ApiError at its deadline, a 499 one when its client leaves, or SendFailed.
   */
  async send({ model, request, priority, signal }: Trip): Promise<ReadRequestOutcome> {
    // Registered before the request is sent, so even an instant answer finds its waiter. The deadline
    // may pass while the enqueue is still in flight: that rejection is awaited below.
    const answer = this.waiters.wait(request.id, request.deadline);
    answer.catch(() => this.coalescer.withdraw(model, request.id, priority));
    const sent = this.coalescer.submit(model, request, priority);
    const abandon = () => this.abandon(model, request, priority, sent);
    signal?.addEventListener('abort', abandon, { once: true });
    try {
      try {
        this.waiters.bind(request.id, { model, id: await sent });
      } catch (err) {
        if (!(err instanceof Withdrawn)) {
          this.waiters.cancel(request.id);
          throw new SendFailed(String(err));
        }
      }
      return await answer;
    } finally {
      signal?.removeEventListener('abort', abandon);
    }
  }

  /** Requests held here, not yet sent, per model. */
  held(): Map<string, number> {
    return this.coalescer.held();
  }

  /** Jobs enqueued per model: with the requests answered, how many requests a job carries. */
  get enqueued(): ReadonlyMap<string, number> {
    return this.sender.enqueued;
  }

  /** Outcomes of abandoned requests that a worker skipped unrun, per model. */
  get skipped(): ReadonlyMap<string, number> {
    return this.waiters.skipped;
  }

  /** Requests waiting for their outcomes. */
  get pending(): number {
    return this.waiters.pending;
  }

  /** The model's BullMQ queue, for the dashboard. */
  queue(model: string) {
    return this.queues.get(model);
  }

  async stop(): Promise<void> {
    this.retention.stop();
    await this.waiters.stop();
    await this.queues.close();
  }

  /**
   * The client left: a request not yet sent is withdrawn; a queued one is named to the model's
   * workers, which skip it if they have not run it yet. Either way nobody waits for it any more.
   */
  private abandon(model: string, request: QueuedRequest, priority: Priority, sent: Promise<string>): void {
    this.waiters.cancel(request.id, new ApiError('cancelled', 'the client closed the connection'));
    const counts = this.abandoned.get(model) ?? { gateway: 0, queue: 0 };
    this.abandoned.set(model, counts);
    if (this.coalescer.withdraw(model, request.id, priority)) {
      counts.gateway++;
      return;
    }
    counts.queue++;
    this.sender.cancel(model, request, sent);
  }
}
