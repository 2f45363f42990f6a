import { Job, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import {
  decodeJobFailure,
  readResultMessage,
  jobDataSchema,
  jobReturnSchema,
  type ReadJobOutcome,
} from '@tserve/contract';
import { JOB_OPTIONS, QUEUE_STREAMS, keys, queueNameFor } from '@tserve/queue';

/** One BullMQ Queue per model, created on first use and sharing the gateway's connection. */
export class QueueSet {
  private readonly queues = new Map<string, Queue>();

  constructor(
    private readonly connection: Redis,
    private readonly prefix: string,
  ) {
    // A Queue writes its settings (the events cap) into Redis once, when created; a Redis that
    // restarted empty has lost them, and BullMQ would put back its default of 10,000 events. A
    // Queue made anew writes them again, through BullMQ's own API.
    let connected = false;
    connection.on('ready', () => {
      if (connected) for (const model of this.queues.keys()) void this.rewriteSettings(model);
      connected = true;
    });
  }

  /** Every model's queue this gateway has used, and those of `models`. */
  all(models: string[]): Queue[] {
    for (const model of models) this.get(model);
    return [...this.queues.values()];
  }

  get(model: string): Queue {
    let queue = this.queues.get(model);
    if (!queue) {
      queue = this.create(model);
      this.queues.set(model, queue);
    }
    return queue;
  }

  /**
   * What a finished job holds, for the fallback read: its outcomes, or its failure given to each of
   * its requests. Undefined while it is not finished, and once its record has expired; 'lost' once
   * Redis no longer holds the job at all (restarted empty, or the job evicted).
   */
  async finished(model: string, jobId: string): Promise<ReadJobOutcome | 'lost' | undefined> {
    const job = await Job.fromId(this.get(model), jobId);
    if (!job) return 'lost';
    if (!job.finishedOn) return undefined;
    const value = jobReturnSchema.safeParse(job.returnvalue);
    if (value.success && value.data.kind === 'outcome') return value.data;
    if (value.success) {
      const record = await this.connection.getBuffer(keys.jobOutcome(this.prefix, jobId));
      const read = record === null ? undefined : readResultMessage(record);
      return read?.kind === 'outcome' ? read : undefined;
    }
    const error = decodeJobFailure(job.failedReason ?? 'no outcome recorded');
    const data = jobDataSchema.safeParse(job.data);
    const requests = data.success ? data.data.requests : [];
    return {
      kind: 'outcome',
      job: jobId,
      model,
      outcomes: requests.map((request) => ({ id: request.id, ok: false, error })),
    };
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.queues.values()].map((q) => q.close()));
  }

  private create(model: string): Queue {
    const queue = new Queue(queueNameFor(model), {
      connection: this.connection,
      prefix: this.prefix,
      defaultJobOptions: JOB_OPTIONS,
      streams: QUEUE_STREAMS,
    });
    // Connection errors reach the breaker through the calls that fail; the event would only be noise.
    queue.on('error', () => {});
    return queue;
  }

  private async rewriteSettings(model: string): Promise<void> {
    const fresh = this.create(model);
    // getVersion resolves once the new Queue has written its settings.
    await fresh.getVersion().catch(() => {});
    await fresh.close().catch(() => {});
  }
}
