import type { Redis } from 'ioredis';
import type { WorkerInfo } from '@tserve/contract';
import { announceWorker, withdrawWorker } from '@tserve/queue';
import type { Logger } from 'pino';

/** Keeps this worker's announcement alive in Redis; the gateway routes to models that have one. */
export class Heartbeat {
  private timer?: NodeJS.Timeout;
  private failing = false;

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

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await withdrawWorker(this.redis, this.prefix, this.info.id).catch(() => {});
  }

  private async beat(): Promise<void> {
    try {
      await announceWorker(this.redis, this.prefix, this.info, this.ttlMs);
      if (this.failing) this.logger.info('heartbeat restored');
      this.failing = false;
    } catch (err) {
      if (!this.failing) this.logger.warn({ err: String(err) }, 'heartbeat failed; retrying');
      this.failing = true;
    }
  }
}
