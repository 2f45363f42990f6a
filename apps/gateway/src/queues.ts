import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { InferenceJobData } from '@tserve/contract';
import { DEFAULT_JOB_OPTIONS, JOB_NAME, queueNameFor } from '@tserve/queue';
import type { CoalescedJob } from './coalescer.js';

/** One BullMQ Queue per model, created on first use and sharing the gateway's connection. */
export class QueueSet {
  private readonly queues = new Map<string, Queue>();

  constructor(
    private readonly connection: Redis,
    private readonly prefix: string,
  ) {}

  get(model: string): Queue {
    let queue = this.queues.get(model);
    if (!queue) {
      queue = new Queue(queueNameFor(model), {
        connection: this.connection,
        prefix: this.prefix,
        defaultJobOptions: DEFAULT_JOB_OPTIONS,
      });
      queue.on('error', () => {});
      this.queues.set(model, queue);
    }
    return queue;
  }

  /** Adds jobs to a model's queue; several go in one MULTI, one round trip. */
  async enqueue(model: string, replyTo: string, jobs: CoalescedJob[]): Promise<void> {
    const queue = this.get(model);
    const entries = jobs.map((job) => ({ name: JOB_NAME, data: { requests: job.requests, replyTo } satisfies InferenceJobData, opts: { jobId: job.id } }));
    if (entries.length === 1) await queue.add(entries[0].name, entries[0].data, entries[0].opts);
    else await queue.addBulk(entries);
  }

  all(): Queue[] {
    return [...this.queues.values()];
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.all().map((q) => q.close()));
  }
}
