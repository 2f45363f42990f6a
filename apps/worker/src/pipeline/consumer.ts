import type { Logger } from 'pino';
import { ApiError, sequenceCount } from '@tserve/contract';
import type { BatchReport, PreparedBatch } from './prepared-batch.js';
import type { ModelBatchRunner } from './runner.js';
import { Precedence, type CallPacing } from './precedence.js';
import type { Job, JobSource, TakenJobs } from './jobs.js';

export interface ConsumerParts {
  /** The jobs this worker takes, until they are settled; the runner's outcomes go there too. */
  jobs: TakenJobs;
  runner: ModelBatchRunner;
  limits: BatchLimits;
  /** Other workers serving the model (the heartbeat): a gateway must not hold requests back for this busy one then. */
  peers: { readonly peers: number };
  logger: Logger;
}

/** A prepared batch and the number of jobs it holds. */
interface Batch {
  prepared: PreparedBatch;
  jobs: number;
}

/**
 * Gathers model batches of the jobs the worker takes (gatherBatch) and hands their requests to the
 * runner, whose outcomes go back to the taken jobs, which settle each job. The next batch is fetched
 * and tokenized while the model thread runs the current one.
 *
 * Interactive work goes ahead of bulk work: the interactive jobs of a gathered batch run
 * first, and between two model calls of bulk work the interactive work that came meanwhile
 * runs, whether gathered already or still waiting in the queue (Precedence keeps those calls short).
 */
export class Consumer {
  private stopping = false;
  private loop?: Promise<void>;
  /** Interactive batches gathered while bulk work runs: they run before its next model call. */
  private readonly urgent: Batch[] = [];
  /**
   * Whether bulk work runs, or is next once what goes ahead of it has run: interactive work
   * gathered meanwhile goes ahead of its next call.
   */
  private bulkRunning = false;
  private readonly precedence: Precedence;
  /** Interactive work's calls: run whole, and timed for Precedence. */
  private readonly interactivePacing: CallPacing = {
    rows: () => undefined,
    between: async () => {},
    ran: (_rows, ms) => this.precedence.interactiveRan(ms),
  };

  constructor(private readonly parts: ConsumerParts) {
    this.precedence = new Precedence(parts.limits.maxSize);
  }

  start(): void {
    this.parts.jobs.start();
    this.loop = this.run();
  }

  /** Stops fetching, finishes the batches in hand and their settlements, then lets go of the queue. */
  async stop(): Promise<void> {
    this.stopping = true;
    // The wait for a job ends by itself within a second; a job it brings is run too.
    await this.loop;
    await this.parts.jobs.close();
  }

  private async run(): Promise<void> {
    let running: Promise<void> = Promise.resolve();
    let modelBusy = false;
    while (!this.stopping) {
      let jobs: Job[];
      try {
        jobs = await gatherBatch(this.parts.jobs, this.parts.limits, (job) =>
          job.requests.reduce((n, r) => n + sequenceCount(r), 0),
        );
      } catch (err) {
        if (this.stopping) break;
        this.parts.logger.warn({ err: String(err) }, 'fetching jobs failed; retrying');
        await new Promise((r) => setTimeout(r, 250));
        continue;
      }
      if (jobs.length === 0) continue;
      // Gateways hear that their jobs were taken as the batch starts (see sendTaken); but while this
      // worker's model is busy another worker may be idle, and the requests held for this one would
      // keep it waiting: then they hear now.
      if (modelBusy && this.parts.peers.peers > 0) this.parts.jobs.sendTaken();
      // Tokenized here while the model thread may still run the previous batch.
      let interactive = await this.prepare(jobs.filter((job) => !job.bulk));
      const bulk = await this.prepare(jobs.filter((job) => job.bulk));
      if (interactive && this.bulkRunning) {
        this.urgent.push(interactive);
        this.parts.jobs.sendTaken();
        if (!bulk) continue;
        interactive = undefined;
      }
      const waitedForModel = modelBusy;
      await running;
      // The batch starts as gathered: work that arrived while it waited forms the next batch, gathered
      // while this one runs. Topping it up first kept the model idle for a Redis round trip each
      // batch, several times the idle share it has without (bench/HISTORY.md). Only interactive
      // work, which must not wait behind bulk work, is looked for first.
      const ahead = waitedForModel && bulk && !this.stopping ? await this.interactiveAhead() : undefined;
      this.parts.jobs.sendTaken();
      modelBusy = true;
      // Bulk work counts as running from now, while what goes ahead of it runs: interactive
      // work gathered meanwhile joins the urgent list and runs before its first call, instead of
      // waiting here for all of its calls.
      if (bulk) this.bulkRunning = true;
      running = (async () => {
        if (ahead) await this.execute(ahead);
        if (interactive) await this.execute(interactive);
        if (bulk) await this.executeBulk(bulk);
      })().finally(() => {
        modelBusy = false;
      });
    }
    await running;
  }

  private async prepare(jobs: Job[]): Promise<Batch | undefined> {
    if (jobs.length === 0) return undefined;
    return { prepared: await this.parts.runner.prepare(jobs.flatMap((j) => j.requests)), jobs: jobs.length };
  }

  /**
   * Interactive jobs waiting now, prepared as a batch of their own, to run ahead of bulk work.
   * BullMQ fetches from the wait list (interactive) before the prioritized set, so the jobs taken
   * here are interactive.
   */
  private async interactiveAhead(): Promise<Batch | undefined> {
    try {
      const waiting = await this.parts.jobs.interactiveWaiting();
      if (waiting === 0) return undefined;
      const jobs = await this.parts.jobs.take(Math.min(waiting, this.parts.limits.maxSize));
      if (jobs.length === 0) return undefined;
      return this.prepare(jobs);
    } catch (err) {
      this.parts.logger.warn({ err: String(err) }, 'fetching interactive jobs failed; running the batch in hand');
      return undefined;
    }
  }

  /**
   * Bulk work, its model calls paced by Precedence; what is interactive runs before and
   * between them, and what was gathered meanwhile before it ends.
   */
  private async executeBulk(batch: Batch): Promise<void> {
    await this.runUrgent();
    await this.execute(batch, {
      rows: () => this.precedence.bulkRows(),
      between: async () => {
        await this.runUrgent();
        const ahead = this.stopping ? undefined : await this.interactiveAhead();
        if (ahead) await this.execute(ahead);
      },
      ran: (rows, ms) => this.precedence.bulkRan(rows, ms),
    });
    // Cleared in the same turn as the last look at the urgent list: anything pushed to it runs.
    for (let next = this.urgent.shift(); next; next = this.urgent.shift()) await this.execute(next);
    this.bulkRunning = false;
  }

  private async runUrgent(): Promise<void> {
    for (let next = this.urgent.shift(); next; next = this.urgent.shift()) await this.execute(next);
  }

  /** Runs a batch; interactive unless `pacing` is given (bulk work's). */
  private async execute(batch: Batch, pacing: CallPacing = this.interactivePacing): Promise<void> {
    try {
      this.done(await this.parts.runner.execute(batch.prepared, pacing), batch.jobs);
    } catch (err) {
      // The runner isolates input errors itself; reaching here is a bug, and its requests must not hang.
      this.parts.logger.error({ err: String(err) }, 'batch failed unexpectedly');
      this.parts.runner.failUnanswered(
        batch.prepared,
        new ApiError('internal', 'internal error while running the model'),
      );
    }
  }

  private done(report: BatchReport, jobs: number): void {
    this.parts.logger.debug(
      { jobs, calls: report.callSizes, expired: report.expired, abandoned: report.abandoned },
      'batch done',
    );
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
 * transport's intake knows that from the work notices it heard, without asking Redis), so an empty queue costs
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
