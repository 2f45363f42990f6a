import { Job, type Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { ApiError, type ErrorBody, type JobOutcome } from '@tserve/contract';

interface Waiter {
  jobId: string;
  queue: Queue;
  since: number;
  resolve: (outcome: JobOutcome) => void;
  reject: (err: ApiError) => void;
  timer: NodeJS.Timeout;
}

/**
 * Delivers each job's outcome to the request waiting for it, by job id.
 *
 * Workers publish outcomes on this gateway instance's own channel (no shared event stream to
 * scan, nothing to trim). Pub/sub is fire-and-forget, so a message sent while the subscriber was
 * reconnecting would be lost: requests that wait longer than one poll period also read their
 * job's state from the queue, which still holds the result for a while after completion.
 */
export class ResultRouter {
  private readonly waiters = new Map<string, Waiter>();
  private pollTimer?: NodeJS.Timeout;
  private polling = false;

  constructor(
    private readonly subscriber: Redis,
    readonly channel: string,
    private readonly pollMs: number,
    private readonly logger: Logger,
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

  /** Resolves with the job's outcome, or rejects with a 504 when `deadline` (epoch ms) passes first. */
  wait(jobId: string, queue: Queue, deadline: number): Promise<JobOutcome> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(jobId);
        // Best effort: a job still waiting is removed; a worker that picks it up anyway drops it unrun.
        queue.remove(jobId).catch(() => {});
        reject(new ApiError('timeout', 'the request deadline passed before the model answered'));
      }, Math.max(0, deadline - Date.now()));
      this.waiters.set(jobId, { jobId, queue, since: Date.now(), resolve, reject, timer });
    });
  }

  /** Releases a waiter whose enqueue failed. */
  cancel(jobId: string): void {
    const waiter = this.waiters.get(jobId);
    if (!waiter) return;
    clearTimeout(waiter.timer);
    this.waiters.delete(jobId);
  }

  async stop(): Promise<void> {
    clearInterval(this.pollTimer);
    await this.subscriber.unsubscribe(this.channel).catch(() => {});
  }

  private deliver(outcome: JobOutcome): void {
    const waiter = this.waiters.get(outcome.id);
    if (!waiter) return; // answered already (by the poll, or a 504), or another gateway's job
    clearTimeout(waiter.timer);
    this.waiters.delete(outcome.id);
    waiter.resolve(outcome);
  }

  private onMessage(message: string): void {
    try {
      this.deliver(JSON.parse(message) as JobOutcome);
    } catch (err) {
      this.logger.warn({ err: String(err) }, 'unreadable result message');
    }
  }

  private async poll(): Promise<void> {
    if (this.polling) return;
    this.polling = true;
    try {
      const cutoff = Date.now() - this.pollMs;
      const stale = [...this.waiters.values()].filter((w) => w.since <= cutoff);
      await Promise.all(stale.map((w) => this.readState(w)));
    } finally {
      this.polling = false;
    }
  }

  private async readState(waiter: Waiter): Promise<void> {
    try {
      const job = await Job.fromId(waiter.queue, waiter.jobId);
      if (!job) return;
      if (job.finishedOn && job.returnvalue) {
        this.deliver(job.returnvalue as JobOutcome);
      } else if (job.finishedOn && job.failedReason) {
        this.deliver({ id: waiter.jobId, ok: false, error: parseFailure(job.failedReason) });
      }
    } catch {
      // Redis unreachable: the request keeps waiting until its deadline.
    }
  }
}

function parseFailure(reason: string): ErrorBody {
  try {
    const body = JSON.parse(reason) as ErrorBody;
    if (typeof body.error === 'string' && typeof body.error_type === 'string') return body;
  } catch {
    // Not written by a worker (e.g. BullMQ's own "job stalled more than allowable limit").
  }
  return { error: `the job failed: ${reason}`, error_type: 'internal' };
}
