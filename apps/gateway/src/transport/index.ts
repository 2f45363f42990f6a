import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { FAILED_KEPT_MS, keys, outcomesKeptMs } from '@tserve/queue';
import { EnqueueCoalescer, JobSender } from './sending.js';
import { QueueSet } from './queues.js';
import { Trips, type AbandonedAt } from './trips.js';
import { RetentionSweep } from './retention.js';
import { RedisLink } from './link.js';

export interface TransportOptions {
  prefix: string;
  /** This gateway's own result channel is named after it. */
  gatewayId: string;
  /** Fallback read period (RESULT_POLL_MS); also sets how long finished jobs are kept. */
  resultPollMs: number;
  /** How long a job may wait unrun before every request in it is past its deadline (REQUEST_TIMEOUT_MS). */
  unrunMs: number;
  /** How long a request sent to Redis waits for a lost Redis to come back (REDIS_FAILOVER_WAIT_MS). */
  failoverWaitMs: number;
}

export interface TransportParts {
  /** The gateway's fail-fast command connection. */
  redis: Redis;
  /** A connection of its own for the result channel. */
  subscriber: Redis;
  /**
   * The served models (the registry): those served now, whose queues are swept too where this
   * gateway has sent nothing yet (started after traffic stopped).
   */
  models: { served(): Array<{ id: string }> };
  /** This gateway's requests outstanding per model (the queue depth). */
  depth: { own(model: string): number };
  /**
   * Every Redis write of a request goes through the breaker, which fails fast while Redis is down;
   * told when the connections are back (a new primary), it closes at once.
   */
  breaker: { guard<T>(call: () => Promise<T>): Promise<T>; reconnected(): void };
  logger: Logger;
}

/**
 * The gateway's whole side of the link to the workers, through BullMQ, put together: the request
 * path gets `trips` (trips.ts: `send` is the one call for a trip), which hands requests to the
 * coalescer and sender (sending.ts) and waits for their outcomes; the retention sweep removes
 * finished jobs. The rest is what operations read. docs/protocol.md describes the messages and keys.
 */
export class Transport {
  /** Each request's trip to its model's workers and back: what the request path uses. */
  readonly trips: Trips;
  private readonly queues: QueueSet;
  private readonly sender: JobSender;
  private readonly coalescer: EnqueueCoalescer;
  private readonly retention: RetentionSweep;
  /** How long a completed job is kept; the sweep runs every half of it. */
  private readonly completedMs: number;

  constructor(parts: TransportParts, options: TransportOptions) {
    this.queues = new QueueSet(parts.redis, options.prefix);
    const link = new RedisLink([parts.redis, parts.subscriber], options.failoverWaitMs);
    link.onBack(() => parts.breaker.reconnected());
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
      depth: parts.depth,
      // A worker's word that it took a job is lost only as a result message is: the same period covers both.
      graceMs: options.resultPollMs,
    });
    this.trips = new Trips({
      coalescer: this.coalescer,
      sender: this.sender,
      subscriber: parts.subscriber,
      channel,
      pollMs: options.resultPollMs,
      jobs: this.queues,
      link,
      logger: parts.logger,
    });
    this.retention = new RetentionSweep(
      { queues: this.queues, models: parts.models },
      { completedMs: this.completedMs, failedMs: FAILED_KEPT_MS, unrunMs: options.unrunMs },
      parts.logger,
    );
  }

  async start(): Promise<void> {
    await this.trips.start();
    // Every half keep period: a finished job is gone within one and a half of them (docs/protocol.md).
    this.retention.start(this.completedMs / 2);
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
    return this.trips.skipped;
  }

  /** Requests abandoned by their clients, per model and place. */
  get abandoned(): ReadonlyMap<string, Readonly<Record<AbandonedAt, number>>> {
    return this.trips.abandoned;
  }

  /** Requests waiting for their outcomes. */
  get pending(): number {
    return this.trips.pending;
  }

  /** The model's BullMQ queue, for the dashboard. */
  queue(model: string) {
    return this.queues.get(model);
  }

  async stop(): Promise<void> {
    this.retention.stop();
    await this.trips.stop();
    await this.queues.close();
  }
}
