import type { Logger } from 'pino';
import { ApiError, sequenceCount } from '@tserve/contract';
import type { PreparedBatch } from './prepared-batch.js';
import type { BatchRunner } from './runner.js';
import type { Settling } from '../transport/settling.js';
import type { Work } from '../transport/work.js';

/** Where batches are gathered from: jobs, waited for one at a time or taken several together. */
export interface JobSource<J> {
  /** Waits for the next job (may still return undefined, e.g. when the source is closing). */
  next(): Promise<J | undefined>;
  /** How many jobs are waiting now. */
  waiting(): Promise<number>;
  /** Up to `count` waiting jobs, fetched together. */
  take(count: number): Promise<J[]>;
}

/** What the consumer needs of the intake (transport/intake.ts): its jobs, and its start and close. */
export interface WorkSource extends JobSource<Work> {
  /** Starts taking jobs; `held` names the jobs whose locks the intake renews. */
  start(held: () => string[]): void;
  /** Interactive jobs waiting now, which may go ahead of a batch holding batch-class work. */
  interactiveWaiting(): Promise<number>;
  close(): Promise<void>;
}

export interface ConsumerParts {
  intake: WorkSource;
  runner: BatchRunner;
  /** Where the runner's outcomes go: told of the jobs fetched, and of each batch's report. */
  settling: Settling;
  limits: BatchLimits;
  /** Other workers serving the model (the heartbeat): a gateway must not hold requests back for this busy one then. */
  peers: { readonly peers: number };
  logger: Logger;
}

/**
 * Gathers model batches of jobs from the intake (gatherBatch) and hands their requests to the
 * runner, whose outcomes go to the settling; it settles each job. The next batch is fetched and
 * tokenized while the model thread runs the current one.
 */
export class Consumer {
  private stopping = false;
  private loop?: Promise<void>;
  private readonly intake: WorkSource;
  private readonly runner: BatchRunner;
  private readonly settling: Settling;
  private readonly limits: BatchLimits;
  private readonly peers: ConsumerParts['peers'];
  private readonly logger: Logger;

  constructor(parts: ConsumerParts) {
    this.intake = parts.intake;
    this.runner = parts.runner;
    this.settling = parts.settling;
    this.limits = parts.limits;
    this.peers = parts.peers;
    this.logger = parts.logger;
  }

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
        jobs = await gatherBatch(this.intake, this.limits, (work) =>
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
      if (modelBusy && this.peers.peers > 0) this.settling.tellTaken();
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
      const urgent = await this.intake.take(Math.min(waiting, this.limits.maxSize));
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

export interface BatchLimits {
  maxSize: number;
  maxWaitMs: number;
}

/**
 * Deadline-bounded dynamic batch formation: waits for the first job, then gathers more until the
 * batch holds `maxSize` sequences or one deadline, `maxWaitMs` after the first job, has passed (the
 * deadline is never extended). The source is asked how many jobs wait before any is fetched (the
 * intake knows that from the work notices it heard, without asking Redis), so an empty queue costs
 * no fetch (a fetch is one of BullMQ's scripts, about ten commands inside Redis); an empty queue also
 * ends the gathering at once, so a lone request never waits for company. The jobs of one round are
 * fetched together, in one round trip.
 */
export async function gatherBatch<J>(
  source: JobSource<J>,
  limits: BatchLimits,
  sizeOf: (job: J) => number,
): Promise<J[]> {
  const first = await source.next();
  if (first === undefined) return [];
  const batch: J[] = [first];
  const deadline = performance.now() + limits.maxWaitMs;
  let size = sizeOf(first);
  while (size < limits.maxSize && performance.now() < deadline) {
    const more = await topUp(source, limits.maxSize - size, sizeOf(first));
    if (more.length === 0) break;
    batch.push(...more);
    for (const job of more) size += sizeOf(job);
  }
  return batch;
}

/**
 * Jobs waiting now, without blocking, about as many as fill `room` sequences. Sizes are known only
 * after the fetch: a gateway coalesces requests into jobs of similar size under steady load, so the
 * size of a job just seen is the guess (a batch may overshoot; the planner splits its model calls).
 */
export async function topUp<J>(source: JobSource<J>, room: number, typicalJobSize: number): Promise<J[]> {
  if (room <= 0) return [];
  const waiting = await source.waiting();
  if (waiting === 0) return [];
  return source.take(Math.min(waiting, Math.max(1, Math.floor(room / Math.max(1, typicalJobSize)))));
}
