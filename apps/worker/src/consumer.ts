import type { Job, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { ApiError, sequenceCount, type InferenceJobData } from '@tserve/contract';
import { gatherBatch, topUp, type BatchLimits, type JobSource } from './batcher.js';
import type { BatchRunner, PreparedBatch } from './runner.js';
import type { JobOutcomeSink } from './outcome-sink.js';

export interface ConsumerOptions {
  limits: BatchLimits;
  lockMs: number;
  token: string;
  /** Whether other workers serve the model: a gateway must not hold requests back for this busy one then. */
  hasPeers: () => boolean;
}

/**
 * Jobs waiting: the wait list (interactive) and the prioritized set (batch class). When both are
 * empty, also drops BullMQ's base wake-up marker. BullMQ re-adds
 * that marker each time a job goes active, so that another worker looks for more; with nothing
 * waiting it only wakes this worker for a fetch that comes back empty (about ten commands inside
 * Redis, per job, at low load). Atomic, so a job added later leaves a fresh marker: no wake-up is
 * lost. Only the base marker ("0") goes; markers of delayed jobs stay.
 */
const WAITING_OR_IDLE = `
local waiting = redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[3])
if waiting == 0 then redis.call('ZREM', KEYS[2], '0') end
return waiting`;

/**
 * Pulls batches from the model's BullMQ queue and hands their requests to the runner, whose
 * outcomes go to the sink; the sink settles each job. Jobs are fetched by hand (not with a
 * processor function) so a batch is gathered in few round trips, and the next batch is fetched and
 * tokenized while the model thread runs the current one. Locks are renewed here in one call for all
 * held jobs; BullMQ's stalled-job checker returns a dead worker's jobs to the queue.
 */
export class Consumer {
  private stopping = false;
  private busy = false;
  private loop?: Promise<void>;
  private renewTimer?: NodeJS.Timeout;
  private readonly source: JobSource<Job<InferenceJobData>>;

  constructor(
    private readonly worker: Worker<InferenceJobData>,
    /** The worker's command connection, for the wait list's length. */
    private readonly connection: Redis,
    private readonly runner: BatchRunner,
    /** Where the runner's outcomes go: told of each job fetched, and of each batch's report. */
    private readonly sink: JobOutcomeSink,
    private readonly options: ConsumerOptions,
    private readonly logger: Logger,
  ) {
    const token = options.token;
    const waitKey = worker.keys.wait;
    const markerKey = worker.keys.marker;
    const prioritizedKey = worker.keys.prioritized;
    this.source = {
      next: async () => {
        const job = (await worker.getNextJob(token, { block: true })) as Job<InferenceJobData> | undefined;
        if (job) this.busy = true;
        return job;
      },
      waiting: async () => {
        const waiting = Number(await connection.eval(WAITING_OR_IDLE, 3, waitKey, markerKey, prioritizedKey));
        // BullMQ tries one fetch before blocking after any job it handed out; the length just read
        // says that fetch would come back empty, so skip it and block on the marker at once.
        if (waiting === 0) (worker as unknown as { drained: boolean }).drained = true;
        return waiting;
      },
      take: async (count) => {
        const jobs = await Promise.all(Array.from({ length: count }, () => worker.getNextJob(token, { block: false })));
        return jobs.filter((j): j is Job<InferenceJobData> => j !== undefined);
      },
    };
  }

  start(): void {
    this.renewTimer = setInterval(() => void this.renewLocks(), Math.max(100, this.options.lockMs / 2));
    this.loop = this.run();
  }

  /** Stops fetching, finishes the batches in hand and their publications. */
  async stop(): Promise<void> {
    this.stopping = true;
    // A worker idle in a blocking fetch holds no job: closing wakes it up.
    if (!this.busy) await this.worker.close();
    await this.loop;
    await this.sink.drain();
    clearInterval(this.renewTimer);
    await this.worker.close();
  }

  private async run(): Promise<void> {
    let running: Promise<void> = Promise.resolve();
    let modelBusy = false;
    while (!this.stopping) {
      if (!modelBusy) this.busy = false;
      let jobs: Job<InferenceJobData>[];
      try {
        jobs = await gatherBatch(this.source, this.options.limits, (job) => sequencesOf(job));
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
      const batch = this.runner.prepare(jobs.flatMap((j) => j.data.requests));
      const waitedForModel = modelBusy;
      await running;
      // This batch waited for the model anyway: interactive work that arrived meanwhile goes ahead of
      // a batch holding bulk (batch-class) work, and otherwise what arrived joins it, delaying no one.
      let ahead: PreparedBatch | undefined;
      if (waitedForModel && !this.stopping) {
        ahead = await this.interactiveAhead(jobs);
        if (!ahead) await this.topUp(batch);
      }
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
   * Interactive jobs waiting now, prepared as a batch of their own, when `jobs` hold batch-class work.
   * BullMQ fetches from the wait list (interactive) before the prioritized set, so the jobs taken
   * here are interactive ones.
   */
  private async interactiveAhead(jobs: Job<InferenceJobData>[]): Promise<PreparedBatch | undefined> {
    if (!jobs.some((job) => (job.opts.priority ?? 0) > 0)) return undefined;
    try {
      const waiting = await this.connection.llen(this.worker.keys.wait);
      if (waiting === 0) return undefined;
      const urgent = await this.source.take(Math.min(waiting, this.options.limits.maxSize));
      if (urgent.length === 0) return undefined;
      this.sink.hold(urgent);
      return this.runner.prepare(urgent.flatMap((j) => j.data.requests));
    } catch (err) {
      this.logger.warn({ err: String(err) }, 'fetching interactive jobs failed; running the batch in hand');
      return undefined;
    }
  }

  private async topUp(batch: PreparedBatch): Promise<void> {
    try {
      const typical = Math.max(1, Math.round(batch.sequences.length / Math.max(1, this.sink.heldJobs)));
      const more = await topUp(this.source, this.options.limits.maxSize - batch.sequences.length, typical);
      if (more.length === 0) return;
      this.sink.hold(more);
      this.runner.prepare(
        more.flatMap((j) => j.data.requests),
        batch,
      );
    } catch (err) {
      this.logger.warn({ err: String(err) }, 'fetching more jobs failed; running the batch as it is');
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

const sequencesOf = (job: Job<InferenceJobData>) => job.data.requests.reduce((n, r) => n + sequenceCount(r), 0);
