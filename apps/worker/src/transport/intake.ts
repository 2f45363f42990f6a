import { Queue, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { describeIssues, encodeJobFailure, jobDataSchema, PROTOCOL, type JobData } from '@tserve/contract';
import { QUEUE_STREAMS, queueNameFor } from '@tserve/queue';
import type { JobSource } from '../pipeline/batcher.js';
import type { Work } from './work.js';

export interface IntakeOptions {
  prefix: string;
  model: string;
  /** This worker's id: its lock token, and the name BullMQ records as each job's `processedBy`. */
  workerId: string;
  /** How long a job stays locked to this worker without renewal; a dead worker's jobs return to the queue after it. */
  lockMs: number;
  /** How often this worker looks for jobs of dead workers. */
  stalledIntervalMs: number;
}

/**
 * How long an idle worker's wait for a job lasts (s). A new job's marker wakes it at once, so this
 * only sets how often an idle worker asks an empty queue anyway, and how long stopping waits for
 * a wait in progress to end.
 */
const IDLE_WAIT_SECONDS = 1;

/**
 * Where the worker's jobs come from: the model's BullMQ queue, through BullMQ's public API for
 * fetching jobs by hand (a Worker with no processor; getNextJob), so that a model batch is
 * gathered from several jobs in few round trips. It keeps the locks of the jobs this worker holds,
 * and BullMQ's stalled-job check returns a dead worker's jobs to the queue.
 */
export class Intake implements JobSource<Work> {
  private readonly worker: Worker<JobData>;
  /** The same queue, for counting what waits. */
  private readonly queue: Queue<JobData>;
  private renewTimer?: NodeJS.Timeout;

  constructor(
    connection: Redis,
    private readonly options: IntakeOptions,
    private readonly logger: Logger,
  ) {
    const name = queueNameFor(options.model);
    this.worker = new Worker<JobData>(name, null, {
      connection,
      prefix: options.prefix,
      autorun: false,
      name: options.workerId,
      lockDuration: options.lockMs,
      stalledInterval: options.stalledIntervalMs,
      // A job whose worker died is retried; twice in a row means the job itself kills workers.
      maxStalledCount: 2,
      drainDelay: IDLE_WAIT_SECONDS,
    });
    this.worker.on('error', (err) => logger.warn({ err: String(err) }, 'queue connection error'));
    this.queue = new Queue<JobData>(name, { connection, prefix: options.prefix, streams: QUEUE_STREAMS });
    this.queue.on('error', () => {});
  }

  /** Starts looking for dead workers' jobs, and renewing the locks of the jobs `held` names, in one call for all. */
  start(held: () => string[]): void {
    void this.worker.startStalledCheckTimer();
    this.renewTimer = setInterval(() => void this.renewLocks(held()), Math.max(100, this.options.lockMs / 2));
  }

  /** Waits for the next job (undefined when the wait ended with none). */
  async next(): Promise<Work | undefined> {
    const job = await this.worker.getNextJob(this.options.workerId, { block: true });
    return job ? this.read(job) : undefined;
  }

  /** Jobs waiting: interactive ones (the wait list) and batch-class ones (the prioritized set). */
  waiting(): Promise<number> {
    return this.queue.getJobCountByTypes('wait', 'prioritized');
  }

  /** Interactive jobs waiting. */
  interactiveWaiting(): Promise<number> {
    return this.queue.getJobCountByTypes('wait');
  }

  /** Up to `count` waiting jobs, interactive before batch class (BullMQ's order), fetched together. */
  async take(count: number): Promise<Work[]> {
    const jobs = await Promise.all(
      Array.from({ length: count }, () => this.worker.getNextJob(this.options.workerId, { block: false })),
    );
    const works = await Promise.all(jobs.filter((job) => job !== undefined).map((job) => this.read(job)));
    return works.filter((work) => work !== undefined);
  }

  /** Stops fetching and renewing; a wait in progress ends within IDLE_WAIT_SECONDS. Call once what is held is settled. */
  async close(): Promise<void> {
    clearInterval(this.renewTimer);
    await this.worker.close();
    await this.queue.close();
  }

  /** The job as work; one this worker cannot read (another protocol, a malformed job) fails at once, with the reason. */
  private async read(job: Job<JobData>): Promise<Work | undefined> {
    const data = jobDataSchema.safeParse(job.data);
    const problem = !data.success
      ? `unreadable job: ${describeIssues(data.error, 'data')}`
      : data.data.protocol !== PROTOCOL
        ? `the job is of wire protocol ${data.data.protocol}; this worker speaks ${PROTOCOL}`
        : undefined;
    if (data.success && problem === undefined) {
      const { requests, replyTo, tellTaken, keepMs } = data.data;
      return { id: job.id!, requests, replyTo, tellTaken, batchClass: (job.opts.priority ?? 0) > 0, keepMs, job };
    }
    this.logger.warn({ jobId: job.id, problem }, 'job failed unread');
    await job
      .moveToFailed(
        new Error(encodeJobFailure({ error: problem!, error_type: 'internal' })),
        this.options.workerId,
        false,
      )
      .catch(() => {});
    return undefined;
  }

  private async renewLocks(ids: string[]): Promise<void> {
    if (ids.length === 0) return;
    try {
      await this.worker.extendJobLocks(
        ids,
        ids.map(() => this.options.workerId),
        this.options.lockMs,
      );
    } catch (err) {
      this.logger.warn({ jobs: ids.length, err: String(err) }, 'lock renewal failed');
    }
  }
}
