import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { DEFAULT_JOB_OPTIONS, queueNameFor } from '@tserve/queue';

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

  all(): Queue[] {
    return [...this.queues.values()];
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.all().map((q) => q.close()));
  }
}
