import { Queue, type JobsOptions } from 'bullmq';
import type { Redis } from 'ioredis';
import type { InferenceJobData, Priority } from '@tserve/contract';
import { EVENTS_KEPT, JOB_NAME, QUEUE_STREAMS, jobOptions, outcomesKeptMs, queueNameFor } from '@tserve/queue';
import type { CoalescedJob } from './coalescer.js';

/** BullMQ's priority for batch-class jobs; interactive ones carry none (0), which BullMQ serves first. */
const BATCH_JOB_PRIORITY = 1;

/** One BullMQ Queue per model, created on first use and sharing the gateway's connection. */
export class QueueSet {
  private readonly queues = new Map<string, Queue>();
  private readonly jobOptions: JobsOptions;
  private readonly keepMs: number;

  constructor(
    private readonly connection: Redis,
    private readonly prefix: string,
    /** The gateway's fallback poll period, which sets how long completed jobs are kept. */
    resultPollMs: number,
  ) {
    this.jobOptions = jobOptions(resultPollMs);
    this.keepMs = outcomesKeptMs(resultPollMs);
    // A Queue writes its events cap into Redis once, when created; a Redis that restarted empty has
    // lost it, and BullMQ's scripts would put back their default of 10,000 (see EVENTS_KEPT).
    connection.on('ready', () => {
      for (const queue of this.queues.values()) {
        connection.hset(queue.keys.meta, 'opts.maxLenEvents', EVENTS_KEPT).catch(() => {});
      }
    });
  }

  get(model: string): Queue {
    let queue = this.queues.get(model);
    if (!queue) {
      queue = new Queue(queueNameFor(model), {
        connection: this.connection,
        prefix: this.prefix,
        defaultJobOptions: this.jobOptions,
        streams: QUEUE_STREAMS,
      });
      queue.on('error', () => {});
      this.queues.set(model, queue);
    }
    return queue;
  }

  /**
   * Adds jobs to a model's queue; several go in one MULTI, one round trip. Interactive jobs go to the
   * wait list, batch jobs to BullMQ's prioritized set, which workers take from only when the wait
   * list is empty: interactive work overtakes queued bulk work at no extra Redis cost.
   */
  async enqueue(model: string, priority: Priority, replyTo: string, jobs: CoalescedJob[]): Promise<void> {
    const queue = this.get(model);
    const opts = (id: string) => (priority === 'batch' ? { jobId: id, priority: BATCH_JOB_PRIORITY } : { jobId: id });
    const entries = jobs.map((job) => ({
      name: JOB_NAME,
      data: { requests: job.requests, replyTo, tellTaken: job.tellTaken, keepMs: this.keepMs } satisfies InferenceJobData,
      opts: opts(job.id),
    }));
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
