import type { Logger } from 'pino';
import { ApiError, sequenceCount } from '@tserve/contract';
import { gatherBatch, type BatchLimits } from './batcher.js';
import type { PreparedBatch } from './prepared-batch.js';
import type { BatchRunner } from './runner.js';
import type { Intake } from '../transport/intake.js';
import type { Settling } from '../transport/settling.js';
import type { Work } from '../transport/work.js';

export interface ConsumerOptions {
  limits: BatchLimits;
  /** Other workers serving the model (the heartbeat): a gateway must not hold requests back for this busy one then. */
  peers: { readonly peers: number };
}

/**
 * Pulls model batches of jobs from the intake and hands their requests to the runner, whose
 * outcomes go to the settling; it settles each job. The next batch is fetched and tokenized while
 * the model thread runs the current one.
 */
export class Consumer {
  private stopping = false;
  private loop?: Promise<void>;

  constructor(
    private readonly intake: Intake,
    private readonly runner: BatchRunner,
    /** Where the runner's outcomes go: told of the jobs fetched, and of each batch's report. */
    private readonly settling: Settling,
    private readonly options: ConsumerOptions,
    private readonly logger: Logger,
  ) {}

  start(): void {
    this.intake.start(() => this.settling.heldJobIds());
    this.loop = this.run();
  }

  /** Stops fetching, finishes the batches in hand and their settlements, then lets go of the queue. */
  async stop(): Promise<void> {
    this.stopping = true;
    // The intake's wait for a job ends by itself within a second; a job it brings is run too.
    await this.loop;
    await this.settling.drain();
    await this.intake.close();
  }

  private async run(): Promise<void> {
    let running: Promise<void> = Promise.resolve();
    let modelBusy = false;
    while (!this.stopping) {
      let jobs: Work[];
      try {
        jobs = await gatherBatch(this.intake, this.options.limits, (work) =>
          work.requests.reduce((n, r) => n + sequenceCount(r), 0),
        );
      } catch (err) {
        if (this.stopping) break;
        this.logger.warn({ err: String(err) }, 'fetching jobs failed; retrying');
        await new Promise((r) => setTimeout(r, 250));
        continue;
      }
      if (jobs.length === 0) continue;
      this.settling.hold(jobs);
      // Gateways hear that their jobs were taken as the batch starts (see tellTaken); but while this
      // worker's model is busy another worker may be idle, and the requests held for this one would
      // keep it waiting: then they hear now.
      if (modelBusy && this.options.peers.peers > 0) this.settling.tellTaken();
      // Tokenized here while the model thread may still run the previous batch.
      const batch = await this.runner.prepare(jobs.flatMap((j) => j.requests));
      const waitedForModel = modelBusy;
      await running;
      // The batch starts as gathered: work that arrived while it waited forms the next batch, gathered
      // while this one runs. Topping it up first kept the model idle for a Redis round trip each
      // batch, several times the idle share it has without (bench/HISTORY.md). Only interactive
      // work, which must not wait behind batch-class work, is looked for first.
      const ahead = waitedForModel && !this.stopping ? await this.interactiveAhead(jobs) : undefined;
      this.settling.tellTaken();
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
   * Interactive jobs waiting now, prepared as a batch of their own, when `jobs` hold batch-class
   * work. BullMQ fetches from the wait list (interactive) before the prioritized set, so the jobs
   * taken here are interactive.
   */
  private async interactiveAhead(jobs: Work[]): Promise<PreparedBatch | undefined> {
    if (!jobs.some((job) => job.batchClass)) return undefined;
    try {
      const waiting = await this.intake.interactiveWaiting();
      if (waiting === 0) return undefined;
      const urgent = await this.intake.take(Math.min(waiting, this.options.limits.maxSize));
      if (urgent.length === 0) return undefined;
      this.settling.hold(urgent);
      return await this.runner.prepare(urgent.flatMap((j) => j.requests));
    } catch (err) {
      this.logger.warn({ err: String(err) }, 'fetching interactive jobs failed; running the batch in hand');
      return undefined;
    }
  }

  private async execute(batch: PreparedBatch, jobs: number): Promise<void> {
    try {
      this.settling.batchDone(await this.runner.execute(batch), jobs);
    } catch (err) {
      // The runner isolates input errors itself; reaching here is a bug, and its requests must not hang.
      this.logger.error({ err: String(err) }, 'batch failed unexpectedly');
      this.runner.failUnanswered(batch, new ApiError('internal', 'internal error while running the model'));
    }
  }
}
