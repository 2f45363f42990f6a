import type { Worker } from 'bullmq';
import type { Logger } from 'pino';
import { ApiError, type InferenceJobData } from '@tserve/contract';
import { gatherBatch, type BatchLimits } from './batcher.js';
import type { BatchRunner, PreparedBatch } from './runner.js';
import type { JobOutcomeSink } from './outcome-sink.js';
import type { WorkSource } from './work-source.js';
import { sequencesOf, type Work } from './work.js';

export interface ConsumerOptions {
  limits: BatchLimits;
  lockMs: number;
  token: string;
  /** Whether other workers serve the model: a gateway must not hold requests back for this busy one then. */
  hasPeers: () => boolean;
}

/**
 * Pulls batches of work (BullMQ jobs and direct entries, from the source) and hands their requests
 * to the runner, whose outcomes go to the sink; the sink settles each job. Jobs are fetched by hand
 * (not with a processor function) so a batch is gathered in few round trips, and the next batch is
 * fetched and tokenized while the model thread runs the current one. Locks are renewed here in one
 * call for all held jobs; BullMQ's stalled-job checker returns a dead worker's jobs to the queue.
 */
export class Consumer {
  private stopping = false;
  private loop?: Promise<void>;
  private renewTimer?: NodeJS.Timeout;

  constructor(
    private readonly worker: Worker<InferenceJobData>,
    private readonly source: WorkSource,
    private readonly runner: BatchRunner,
    /** Where the runner's outcomes go: told of the work fetched, and of each batch's report. */
    private readonly sink: JobOutcomeSink,
    private readonly options: ConsumerOptions,
    private readonly logger: Logger,
  ) {}

  start(): void {
    this.renewTimer = setInterval(() => void this.renewLocks(), Math.max(100, this.options.lockMs / 2));
    this.loop = this.run();
  }

  /** Stops fetching, finishes the batches in hand and their publications. */
  async stop(): Promise<void> {
    this.stopping = true;
    // Wakes the loop from a blocking wait; the jobs it holds are fetched on another connection.
    this.source.interrupt();
    await this.loop;
    await this.sink.drain();
    clearInterval(this.renewTimer);
    await this.worker.close();
  }

  private async run(): Promise<void> {
    let running: Promise<void> = Promise.resolve();
    let modelBusy = false;
    while (!this.stopping) {
      let jobs: Work[];
      try {
        jobs = await gatherBatch(this.source, this.options.limits, sequencesOf);
      } catch (err) {
        if (this.stopping) break;
        this.logger.warn({ err: String(err) }, 'fetching jobs failed; retrying');
        await new Promise((r) => setTimeout(r, 250));
        continue;
      }
      if (jobs.length === 0) continue;
      this.sink.hold(jobs);
      // Gateways hear that their jobs were taken as the batch starts (see tellTaken); but while this
      // worker's model is busy another worker may be idle, and the requests held for this one would
      // keep it waiting: then they hear now.
      if (modelBusy && this.options.hasPeers()) this.sink.tellTaken();
      // Tokenized here while the model thread may still run the previous batch.
      const batch = await this.runner.prepare(jobs.flatMap((j) => j.requests));
      const waitedForModel = modelBusy;
      await running;
      // The batch starts as gathered: work that arrived while it waited forms the next batch, gathered
      // while this one runs. Topping it up first kept the model idle for a Redis round trip each
      // batch: at c=64 on a 2-core machine, the model thread idled 8.3% of the time with the top-up
      // and 1.5% without (medians of nine runs each). Only interactive work, which must not wait
      // behind bulk (batch-class) work, is looked for first.
      const ahead = waitedForModel && !this.stopping ? await this.interactiveAhead(jobs) : undefined;
      this.sink.tellTaken();
      modelBusy = true;
      running = (async () => {
        if (ahead) await this.execute(ahead, 0);
        await this.execute(batch, jobs.length);
      })().finally(() => {
        modelBusy = false;
      });
    }
    await running;
  }

  /**
   * Interactive work waiting now, prepared as a batch of its own, when `jobs` hold batch-class work.
   * The source takes direct entries first, and BullMQ fetches from the wait list (interactive)
   * before the prioritized set, so the work taken here is interactive.
   */
  private async interactiveAhead(jobs: Work[]): Promise<PreparedBatch | undefined> {
    if (!jobs.some((job) => job.bulk)) return undefined;
    try {
      const waiting = await this.source.interactiveWaiting();
      if (waiting === 0) return undefined;
      const urgent = await this.source.take(Math.min(waiting, this.options.limits.maxSize));
      if (urgent.length === 0) return undefined;
      this.sink.hold(urgent);
      return await this.runner.prepare(urgent.flatMap((j) => j.requests));
    } catch (err) {
      this.logger.warn({ err: String(err) }, 'fetching interactive jobs failed; running the batch in hand');
      return undefined;
    }
  }

  private async execute(batch: PreparedBatch, jobs: number): Promise<void> {
    try {
      this.sink.batchDone(await this.runner.execute(batch), jobs);
    } catch (err) {
      // The runner isolates input errors itself; reaching here is a bug, and its requests must not hang.
      this.logger.error({ err: String(err) }, 'batch failed unexpectedly');
      this.runner.failUnanswered(batch, new ApiError('internal', 'internal error while running the model'));
    }
  }

  private async renewLocks(): Promise<void> {
    const ids = this.sink.heldJobIds();
    if (ids.length === 0) return;
    try {
      await this.worker.extendJobLocks(
        ids,
        ids.map(() => this.options.token),
        this.options.lockMs,
      );
    } catch (err) {
      this.logger.warn({ jobs: ids.length, err: String(err) }, 'lock renewal failed');
    }
  }
}
