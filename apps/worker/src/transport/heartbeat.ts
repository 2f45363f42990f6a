import type { Redis } from 'ioredis';
import type { WorkerInfo } from '@tserve/contract';
import { announceWorker, withdrawWorker } from '@tserve/queue';
import type { Logger } from 'pino';

export interface HeartbeatParts {
  /** Carries the beats; its commands are pipelined. */
  redis: Redis;
  /** QUEUE_PREFIX: where the workers' heartbeats are. */
  prefix: string;
  /** What each beat announces; the worker changes it as it loads, serves and stops. */
  info: WorkerInfo;
  /** HEARTBEAT_MS. */
  everyMs: number;
  /** WORKER_TTL_MS: a beat expires after it. */
  ttlMs: number;
  logger: Logger;
}

/**
 * Keeps this worker's announcement alive in Redis; the gateway routes to models that have one. Each
 * beat also counts the other ready workers of the same model, as of that beat.
 */
export class Heartbeat {
  private timer?: NodeJS.Timeout;
  private failing = false;
  private peerCount = 0;
  private usage?: () => Partial<WorkerInfo>;

  constructor(private readonly parts: HeartbeatParts) {}

  async start(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => void this.beat(), this.parts.everyMs);
    this.timer.unref();
  }

  /**
   * Announces that this worker is stopping: gateways no longer count it among its model's workers
   * while it finishes the jobs it holds. The beats go on until `stop`.
   */
  async drain(): Promise<void> {
    this.parts.info.state = 'draining';
    await this.beat();
  }

  /** Leaves the registry; bounded, since a worker leaving because Redis is gone must still exit. */
  async stop(timeoutMs = 2000): Promise<void> {
    clearInterval(this.timer);
    await Promise.race([
      withdrawWorker(this.parts.redis, this.parts.prefix, this.parts.info).catch(() => {}),
      new Promise((r) => setTimeout(r, timeoutMs).unref()),
    ]);
  }

  /** From now on each beat also carries what `read` measures then: the model's busy time, the process's memory. */
  reportUsage(read: () => Partial<WorkerInfo>): void {
    this.usage = read;
  }

  /** Other ready workers serving this worker's model, at the last beat. */
  get peers(): number {
    return this.peerCount;
  }

  /** Announces at once (after the announcement changed, e.g. loading → ready). */
  async beat(): Promise<void> {
    if (this.usage) Object.assign(this.parts.info, this.usage());
    try {
      const ready = await announceWorker(this.parts.redis, this.parts.prefix, this.parts.info, this.parts.ttlMs);
      this.peerCount = Math.max(0, ready - (this.parts.info.state === 'ready' ? 1 : 0));
      if (this.failing) this.parts.logger.info('heartbeat restored');
      this.failing = false;
    } catch (err) {
      if (!this.failing) this.parts.logger.warn({ err: String(err) }, 'heartbeat failed; retrying');
      this.failing = true;
    }
  }
}
