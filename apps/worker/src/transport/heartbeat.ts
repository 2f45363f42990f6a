import type { Redis } from 'ioredis';
import type { WorkerInfo } from '@tserve/contract';
import { announceWorker, withdrawWorker } from '@tserve/queue';
import type { Logger } from 'pino';

/**
 * Keeps this worker's announcement alive in Redis; the gateway routes to models that have one. Each
 * beat also counts the other ready workers of the same model, as of that beat.
 */
export class Heartbeat {
  private timer?: NodeJS.Timeout;
  private failing = false;
  private peerCount = 0;
  private usage?: () => Partial<WorkerInfo>;

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly info: WorkerInfo,
    private readonly everyMs: number,
    private readonly ttlMs: number,
    private readonly logger: Logger,
  ) {}

  async start(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => void this.beat(), this.everyMs);
    this.timer.unref();
  }

  /**
   * Announces that this worker is stopping: gateways no longer count it among its model's workers
   * while it finishes the jobs it holds. The beats go on until `stop`.
   */
  async drain(): Promise<void> {
    this.info.state = 'draining';
    await this.beat();
  }

  /** Leaves the registry; bounded, since a worker leaving because Redis is gone must still exit. */
  async stop(timeoutMs = 2000): Promise<void> {
    clearInterval(this.timer);
    await Promise.race([
      withdrawWorker(this.redis, this.prefix, this.info).catch(() => {}),
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
    if (this.usage) Object.assign(this.info, this.usage());
    try {
      const ready = await announceWorker(this.redis, this.prefix, this.info, this.ttlMs);
      this.peerCount = Math.max(0, ready - (this.info.state === 'ready' ? 1 : 0));
      if (this.failing) this.logger.info('heartbeat restored');
      this.failing = false;
    } catch (err) {
      if (!this.failing) this.logger.warn({ err: String(err) }, 'heartbeat failed; retrying');
      this.failing = true;
    }
  }
}
