import type { Queue } from 'bullmq';
import type { QueueSet } from './queues.js';
import type { Logger } from 'pino';

export interface Retention {
  /** How long a completed job (its requests' inputs and outcomes) is kept: outcomesKeptMs. */
  completedMs: number;
  /** How long a failed job is kept: FAILED_KEPT_MS. */
  failedMs: number;
  /**
   * How long a job waits unrun before nobody wants it: every request in it is past its deadline
   * (REQUEST_TIMEOUT_MS). A model scaled to zero whose worker never came would keep them forever.
   */
  unrunMs: number;
}

/**
 * Removes finished jobs once they are older than they are kept, and the queues' event streams (which
 * copy each job's return value), every `periodMs`, through BullMQ's public API. This is the one bound
 * on a completed job's age (the job's own options bound only how many are kept, job-options.ts):
 * BullMQ removes by age only when another job finishes, so when traffic stops the last ones, users'
 * texts and outputs, would stay in Redis with no expiry. Every gateway sweeps the queues it used;
 * the sweeps are idempotent.
 */
export class RetentionSweep {
  private timer?: NodeJS.Timeout;
  private sweeping = false;
  private loggedAt = 0;

  constructor(
    /**
     * The queues this gateway used, and the models served now, whose queues are swept too where
     * this gateway has sent nothing yet (started after traffic stopped).
     */
    private readonly swept: { queues: Pick<QueueSet, 'all'>; models: { served(): Array<{ id: string }> } },
    private readonly retention: Retention,
    private readonly logger: Logger,
  ) {}

  start(periodMs: number): void {
    this.timer = setInterval(() => void this.sweep(), periodMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  async sweep(): Promise<void> {
    if (this.sweeping) return;
    this.sweeping = true;
    try {
      const { queues, models } = this.swept;
      for (const queue of queues.all(models.served().map((m) => m.id))) {
        await this.removeOlder(queue, 'completed', this.retention.completedMs);
        await this.removeOlder(queue, 'failed', this.retention.failedMs);
        await this.removeOlder(queue, 'wait', this.retention.unrunMs);
        await this.removeOlder(queue, 'prioritized', this.retention.unrunMs);
        // Nothing reads the events (results travel over pub/sub); those of the last period go too.
        await queue.trimEvents(0);
      }
    } catch (err) {
      // Redis down: the next sweep removes what this one could not. Logged once a minute at most.
      if (Date.now() - this.loggedAt > 60_000) {
        this.loggedAt = Date.now();
        this.logger.warn({ err: String(err) }, 'retention sweep failed; finished jobs are removed at the next one');
      }
    } finally {
      this.sweeping = false;
    }
  }

  /** Removes the queue's jobs of `state` finished more than `ageMs` ago, a thousand at a time. */
  private async removeOlder(
    queue: Queue,
    state: 'completed' | 'failed' | 'wait' | 'prioritized',
    ageMs: number,
  ): Promise<void> {
    const batch = 1000;
    while ((await queue.clean(ageMs, batch, state)).length === batch);
  }
}
