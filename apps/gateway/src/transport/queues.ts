import { Job, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import {
  decodeJobFailure,
  decodeRecordedOutcome,
  jobDataSchema,
  jobReturnSchema,
  PROTOCOL,
  type JobData,
  type Priority,
  type ReadJobOutcome,
  type WorkNotice,
} from '@tserve/contract';
import { JOB_NAME, QUEUE_STREAMS, jobOptions, keys, outcomesKeptMs, queueNameFor } from '@tserve/queue';
import type { CoalescedJob } from './coalescer.js';

/** BullMQ's priority for batch-class jobs; interactive ones carry none (0), which BullMQ serves first. */
const BATCH_JOB_PRIORITY = 1;

/** A job's name, which the dashboard shows: how many requests it carries. */
const jobName = (requests: number) => `${JOB_NAME} ×${requests}`;

/** One BullMQ Queue per model, created on first use and sharing the gateway's connection. */
export class QueueSet {
  private readonly queues = new Map<string, Queue>();
  private readonly jobOptions: ReturnType<typeof jobOptions>;
  private readonly keepMs: number;

  constructor(
    private readonly connection: Redis,
    private readonly prefix: string,
    /** The gateway's fallback poll period, which sets how long completed jobs are kept. */
    resultPollMs: number,
  ) {
    this.jobOptions = jobOptions(resultPollMs);
    this.keepMs = outcomesKeptMs(resultPollMs);
    // A Queue writes its settings (the events cap) into Redis once, when created; a Redis that
    // restarted empty has lost them, and BullMQ would put back its default of 10,000 events. A
    // Queue made anew writes them again, through BullMQ's own API.
    let connected = false;
    connection.on('ready', () => {
      if (connected) for (const model of this.queues.keys()) void this.rewriteSettings(model);
      connected = true;
    });
  }

  /** Every model's queue this gateway has used. */
  all(): Queue[] {
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
   * Adds jobs to a model's queue; several go in one call, one round trip. Interactive jobs go to the
   * wait list, batch jobs to BullMQ's prioritized set, which workers take from only when the wait
   * list is empty: interactive work overtakes queued batch-class work at no extra Redis cost.
   */
  async enqueue(model: string, priority: Priority, replyTo: string, jobs: CoalescedJob[]): Promise<void> {
    const queue = this.get(model);
    const entries = jobs.map((job) => ({
      name: jobName(job.requests.length),
      data: {
        kind: 'job',
        protocol: PROTOCOL,
        requests: job.requests,
        replyTo,
        tellTaken: job.tellTaken,
        keepMs: this.keepMs,
      } satisfies JobData,
      opts: priority === 'batch' ? { jobId: job.id, priority: BATCH_JOB_PRIORITY } : { jobId: job.id },
    }));
    if (entries.length === 1) await queue.add(entries[0].name, entries[0].data, entries[0].opts);
    else await queue.addBulk(entries);
    // Once Redis holds the jobs, not before: a worker woken ahead of them would find nothing, and wait
    // for its next poll. Not awaited: the request waits for its outcome, not for the notice.
    const notice: WorkNotice = { kind: 'work', jobs: entries.length, priority };
    this.connection.publish(keys.work(this.prefix, model), JSON.stringify(notice)).catch(() => {});
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
      return record === null ? undefined : decodeRecordedOutcome(record);
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
      defaultJobOptions: this.jobOptions,
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
