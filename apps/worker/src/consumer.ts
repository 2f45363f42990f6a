import type { Job, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { CancelNotice, InferenceJobData, JobOutcome, QueuedRequest, RequestOutcome } from '@tserve/contract';
import { gatherBatch, topUp, type BatchLimits, type JobSource } from './batcher.js';
import type { BatchRunner, BatchReport, PreparedBatch } from './runner.js';

export interface ConsumerOptions {
  model: string;
  limits: BatchLimits;
  lockMs: number;
  token: string;
  onBatch?: (report: BatchReport, jobs: number) => void;
}

/** A job this worker holds: its lock is renewed until every one of its requests has an outcome. */
interface HeldJob {
  job: Job<InferenceJobData>;
  outcomes: Array<RequestOutcome | undefined>;
  remaining: number;
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

/** How long a cancellation is remembered: longer than any request's deadline may be. */
const CANCEL_MEMORY_MS = 10 * 60_000;

/**
 * Pulls batches from the model's BullMQ queue, hands their requests to the runner, and settles each
 * job once all its requests have outcomes: one publication to the waiting gateway, one record in
 * the queue. Jobs are fetched by hand (not with a processor function) so a batch is gathered in few
 * round trips, and the next batch is fetched and tokenized while the model thread runs the current
 * one. Locks are renewed here in one call for all held jobs; BullMQ's stalled-job checker returns a
 * dead worker's jobs to the queue.
 */
export class Consumer {
  private stopping = false;
  private busy = false;
  private loop?: Promise<void>;
  private renewTimer?: NodeJS.Timeout;
  private readonly settling = new Set<Promise<void>>();
  /** Held jobs by job id, and the job of each of their requests. */
  private readonly held = new Map<string, HeldJob>();
  private readonly jobOfRequest = new Map<string, { held: HeldJob; index: number }>();
  /** Requests whose client left, with when that was heard. */
  private readonly cancelled = new Map<string, number>();
  private readonly source: JobSource<Job<InferenceJobData>>;

  constructor(
    private readonly worker: Worker<InferenceJobData>,
    /** The worker's command connection, for the wait list's length. */
    private readonly connection: Redis,
    /** Publishes outcomes and records them; its commands are pipelined. */
    private readonly publisher: Redis,
    private readonly runner: BatchRunner,
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

  /** True for a request whose client has gone away; the runner skips it. */
  isAbandoned = (requestId: string): boolean => this.cancelled.has(requestId);

  /** Remembers requests named on the model's cancellation channel. */
  noteCancelled(message: string): void {
    try {
      const notice = JSON.parse(message) as CancelNotice;
      const now = Date.now();
      for (const id of notice.ids) this.cancelled.set(id, now);
    } catch {
      this.logger.warn('unreadable cancellation message');
    }
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
    await Promise.allSettled(this.settling);
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
      this.hold(jobs);
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
      this.hold(urgent);
      return this.runner.prepare(urgent.flatMap((j) => j.data.requests));
    } catch (err) {
      this.logger.warn({ err: String(err) }, 'fetching interactive jobs failed; running the batch in hand');
      return undefined;
    }
  }

  private async topUp(batch: PreparedBatch): Promise<void> {
    try {
      const typical = Math.max(1, Math.round(batch.sequences.length / Math.max(1, this.held.size)));
      const more = await topUp(this.source, this.options.limits.maxSize - batch.sequences.length, typical);
      if (more.length === 0) return;
      this.hold(more);
      this.runner.prepare(more.flatMap((j) => j.data.requests), batch);
    } catch (err) {
      this.logger.warn({ err: String(err) }, 'fetching more jobs failed; running the batch as it is');
    }
  }

  private async execute(batch: PreparedBatch, jobs: number): Promise<void> {
    try {
      const report = await this.runner.execute(batch);
      this.options.onBatch?.(report, jobs);
    } catch (err) {
      // The runner isolates input errors itself; reaching here is a bug, and its requests must not hang.
      this.logger.error({ err: String(err) }, 'batch failed unexpectedly');
      for (const { owner } of batch.sequences) {
        if (this.jobOfRequest.has(owner.pending.request.id)) {
          this.finish(owner.pending.request, {
            id: owner.pending.request.id,
            ok: false,
            error: { error: 'internal error while running the model', error_type: 'internal' },
          });
        }
      }
    }
  }

  private hold(jobs: Job<InferenceJobData>[]): void {
    for (const job of jobs) {
      const held: HeldJob = { job, outcomes: new Array<RequestOutcome | undefined>(job.data.requests.length), remaining: job.data.requests.length };
      this.held.set(job.id!, held);
      job.data.requests.forEach((request, index) => this.jobOfRequest.set(request.id, { held, index }));
    }
  }

  /** Passed to the runner: records a request's outcome; the job is settled with its last one. */
  finish = (request: QueuedRequest, outcome: RequestOutcome): void => {
    const place = this.jobOfRequest.get(request.id);
    if (!place) return;
    this.jobOfRequest.delete(request.id);
    this.cancelled.delete(request.id);
    place.held.outcomes[place.index] = outcome;
    if (--place.held.remaining === 0) this.settle(place.held);
  };

  /** Publishes first (clients are waiting), then records the job as completed; both in one round trip. */
  private settle(held: HeldJob): void {
    const { job } = held;
    this.held.delete(job.id!);
    const result: JobOutcome = { job: job.id!, model: this.options.model, outcomes: held.outcomes as RequestOutcome[] };
    const work = (async () => {
      const [published, recorded] = await Promise.allSettled([
        this.publisher.publish(job.data.replyTo, JSON.stringify(result)),
        job.moveToCompleted(result, this.options.token, false),
      ]);
      for (const r of [published, recorded]) {
        if (r.status === 'rejected') this.logger.warn({ jobId: job.id, err: String(r.reason) }, 'settling job failed');
      }
      // Failures get their type only: messages may quote the user's input.
      const failed = result.outcomes.filter((o) => !o.ok);
      this.logger.debug(
        { jobId: job.id, requests: result.outcomes.map((o) => o.id), failed: failed.map((o) => (o.ok ? undefined : o.error.error_type)) },
        'job settled',
      );
    })();
    this.settling.add(work);
    void work.finally(() => this.settling.delete(work));
  }

  private async renewLocks(): Promise<void> {
    const now = Date.now();
    for (const [id, at] of this.cancelled) if (now - at > CANCEL_MEMORY_MS) this.cancelled.delete(id);
    const ids = [...this.held.keys()];
    if (ids.length === 0) return;
    try {
      await this.worker.extendJobLocks(ids, ids.map(() => this.options.token), this.options.lockMs);
    } catch (err) {
      this.logger.warn({ jobs: ids.length, err: String(err) }, 'lock renewal failed');
    }
  }
}

const sequencesOf = (job: Job<InferenceJobData>) => job.data.requests.reduce((n, r) => n + (r.sequences ?? r.inputs.length), 0);
