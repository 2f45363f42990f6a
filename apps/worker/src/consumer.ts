import type { Job, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { InferenceJobData, JobOutcome } from '@tserve/contract';
import { gatherBatch, type BatchLimits } from './batcher.js';
import type { BatchRunner, BatchReport, RunnableJob } from './runner.js';

export interface ConsumerOptions {
  limits: BatchLimits;
  lockMs: number;
  token: string;
  onBatch?: (report: BatchReport, jobs: number) => void;
}

/**
 * Pulls batches from the model's BullMQ queue and settles each job: the outcome is published to
 * the waiting gateway by job id and recorded in the queue. Jobs are fetched by hand (not with a
 * processor function) so a batch can be gathered in one round trip; locks are renewed here while
 * a batch runs, and BullMQ's stalled-job checker returns a dead worker's jobs to the queue.
 */
export class Consumer {
  private stopping = false;
  private busy = false;
  private loop?: Promise<void>;
  private readonly settling = new Set<Promise<void>>();
  private readonly inFlight = new Map<string, Job<InferenceJobData>>();

  constructor(
    private readonly worker: Worker<InferenceJobData>,
    private readonly publisher: Redis,
    private readonly runner: BatchRunner,
    private readonly options: ConsumerOptions,
    private readonly logger: Logger,
  ) {}

  start(): void {
    this.loop = this.run();
  }

  /** Stops fetching, finishes the batch in hand and its publications. */
  async stop(): Promise<void> {
    this.stopping = true;
    // A worker idle in a blocking fetch holds no job: closing wakes it up.
    if (!this.busy) await this.worker.close();
    await this.loop;
    await Promise.allSettled(this.settling);
    await this.worker.close();
  }

  private async run(): Promise<void> {
    const source = {
      take: async (block: boolean) => {
        const job = (await this.worker.getNextJob(this.options.token, { block })) as Job<InferenceJobData> | undefined;
        if (job) this.busy = true;
        return job;
      },
    };
    while (!this.stopping) {
      this.busy = false;
      let jobs: Job<InferenceJobData>[];
      try {
        jobs = await gatherBatch(source, this.options.limits, (job) => job.data.inputs.length);
      } catch (err) {
        if (this.stopping) break;
        this.logger.warn({ err: String(err) }, 'fetching jobs failed; retrying');
        await new Promise((r) => setTimeout(r, 250));
        continue;
      }
      if (jobs.length === 0) continue;
      await this.runBatch(jobs);
    }
  }

  private async runBatch(jobs: Job<InferenceJobData>[]): Promise<void> {
    for (const job of jobs) this.inFlight.set(job.id!, job);
    const renew = setInterval(() => void this.extendLocks(), Math.max(100, this.options.lockMs / 2));
    try {
      const runnable: RunnableJob[] = jobs.map((job) => ({ id: job.id!, data: job.data }));
      const report = await this.runner.run(runnable);
      this.options.onBatch?.(report, jobs.length);
    } catch (err) {
      // The runner isolates input errors itself; reaching here is a bug, and its jobs must not hang.
      this.logger.error({ err: String(err) }, 'batch failed unexpectedly');
      for (const job of jobs) {
        if (this.inFlight.has(job.id!)) {
          void this.settle({ id: job.id!, data: job.data }, { id: job.id!, ok: false, error: { error: 'internal error while running the model', error_type: 'internal' } });
        }
      }
    } finally {
      clearInterval(renew);
    }
  }

  private async extendLocks(): Promise<void> {
    await Promise.all(
      [...this.inFlight.values()].map((job) =>
        job.extendLock(this.options.token, this.options.lockMs).catch((err) => this.logger.warn({ jobId: job.id, err: String(err) }, 'lock renewal failed')),
      ),
    );
  }

  /** Passed to the runner as its Finish: publish first (the client is waiting), then record. */
  settle = (job: RunnableJob, outcome: JobOutcome): Promise<void> => {
    const bullJob = this.inFlight.get(job.id);
    this.inFlight.delete(job.id);
    const work = (async () => {
      const publish = this.publisher.publish(job.data.replyTo, JSON.stringify(outcome));
      const record = bullJob
        ? outcome.ok
          ? bullJob.moveToCompleted(outcome, this.options.token, false)
          : bullJob.moveToFailed(new Error(JSON.stringify(outcome.error)), this.options.token, false)
        : Promise.resolve();
      const [published, recorded] = await Promise.allSettled([publish, record]);
      for (const r of [published, recorded]) {
        if (r.status === 'rejected') this.logger.warn({ jobId: job.id, err: String(r.reason) }, 'settling job failed');
      }
      // A failure gets an info line with its type only: messages may quote the user's input.
      if (outcome.ok) this.logger.debug({ jobId: job.id, ok: true }, 'job settled');
      else this.logger.info({ jobId: job.id, ok: false, error_type: outcome.error.error_type }, 'job failed');
    })();
    this.settling.add(work);
    void work.finally(() => this.settling.delete(work));
    return work;
  };
}
