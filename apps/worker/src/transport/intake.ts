import { Queue, Worker, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import {
  describeIssues,
  encodeJobFailure,
  jobDataSchema,
  PROTOCOL,
  readMessage,
  workNoticeSchema,
  type JobData,
} from '@tserve/contract';
import { QUEUE_STREAMS, queueNameFor } from '@tserve/queue';
import { Announcements } from './announcements.js';
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
  /** Other workers serving the model (the heartbeat). */
  peers: { readonly peers: number };
}

/**
 * How long an idle worker waits for a work notice before it asks the queue anyway (ms). A notice
 * wakes it at once, so this only bounds how late it finds a job whose notice it missed (its
 * subscriber reconnecting) or that came back from a dead worker, and how long stopping waits.
 */
const IDLE_POLL_MS = 1000;

/**
 * Where the worker's jobs come from: the model's BullMQ queue, through BullMQ's public API for
 * fetching jobs by hand (a Worker with no processor; getNextJob without blocking), so that a model
 * batch is gathered from several jobs in few round trips. It keeps the locks of the jobs this
 * worker holds, and BullMQ's stalled-job check returns a dead worker's jobs to the queue.
 *
 * It asks Redis for a job only when one is likely there (Announcements): the gateways announce the
 * jobs they add on the model's work channel. So a lone request costs the queue its add, one fetch
 * and its completion, and a worker that waits costs Redis nothing between polls. BullMQ's blocking
 * wait cost two more fetches per job, both finding nothing: one because its worker had just taken
 * a job, one for the wake-up marker that taking a job leaves for the next worker.
 */
export class Intake {
  private readonly worker: Worker<JobData>;
  /** The same queue, for counting what waits. */
  private readonly queue: Queue<JobData>;
  private renewTimer?: NodeJS.Timeout;
  private readonly announcements = new Announcements();
  /** Ends the idle wait early: a notice came, or the intake is closing. */
  private wake?: () => void;
  private closing = false;
  /** A notice's copy of its job, heard while this worker waited alone on the model: started ahead of its fetch. */
  private ahead?: { id: string; data: unknown };
  /** Jobs that a fetch for work started ahead brought instead of that work's own: handed out first. */
  private readonly fetchedInstead: Work[] = [];
  /** The jobs this worker took and has not settled (taken-jobs.ts), named at start. */
  private taken: () => string[] = () => [];

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
    });
    this.worker.on('error', (err) => logger.warn({ err: String(err) }, 'queue connection error'));
    this.queue = new Queue<JobData>(name, { connection, prefix: options.prefix, streams: QUEUE_STREAMS });
    this.queue.on('error', () => {});
  }

  /** Starts looking for dead workers' jobs, and renewing the locks of the jobs `taken` names, in one call for all. */
  start(taken: () => string[]): void {
    this.taken = taken;
    void this.worker.startStalledCheckTimer();
    this.renewTimer = setInterval(() => void this.renewLocks(taken()), Math.max(100, this.options.lockMs / 2));
  }

  /**
   * A message heard on the model's work channel; false if it is not a work notice. A notice's copy
   * of its job is started ahead only by a worker that waits alone on its model and holds no job: one
   * that holds jobs has its model busy, and may have fetched this very job already, on a poll that
   * overtook the notice; a second copy of it would take the first's place in the settling.
   */
  noticed(message: string): boolean {
    const notice = readMessage(workNoticeSchema, message);
    if (!notice) return false;
    this.announcements.heard(notice.jobs, notice.priority === 'interactive');
    const alone = () => this.options.peers.peers === 0 && this.taken().length === 0;
    if (notice.job && this.wake && !this.ahead && alone()) this.ahead = notice.job;
    this.wake?.();
    return true;
  }

  /** Waits for the next job (undefined when the wait ended with none). */
  async next(): Promise<Work | undefined> {
    if (!this.announcements.expecting && this.fetchedInstead.length === 0) await this.idle();
    // Fetched already, so run even while closing: its lock is this worker's.
    const instead = this.fetchedInstead.shift();
    if (instead) return instead;
    if (this.closing) return undefined;
    const ahead = this.startAhead();
    if (ahead) return ahead;
    const [work] = await this.fetch(1, !this.announcements.expecting);
    return work;
  }

  /**
   * Jobs waiting (interactive and bulk class). None where none was announced. Otherwise the
   * announced count where this worker is the model's only one; with peers, the queue's own count:
   * each worker hears every notice, and a count the peers already took from would send each of
   * them fetching for all of it.
   */
  async waiting(): Promise<number> {
    const announced = this.announcements.waiting;
    if (announced === 0 || (announced !== undefined && this.options.peers.peers === 0)) return announced;
    const waiting = await this.queue.getJobCountByTypes('wait', 'prioritized');
    this.announcements.counted(waiting);
    return waiting;
  }

  /**
   * Interactive jobs waiting: none unless a notice announced some since the last call; then the
   * queue's own count (a peer may have taken them). So bulk work that looks before each of its
   * model calls costs Redis nothing while no interactive work comes. A job whose notice was lost is
   * found by the next gathering instead, which takes interactive jobs first.
   */
  async interactiveWaiting(): Promise<number> {
    if (!this.announcements.interactiveSinceAsked()) return 0;
    return this.queue.getJobCountByTypes('wait');
  }

  /** Up to `count` waiting jobs, interactive before bulk class (BullMQ's order), fetched together. */
  async take(count: number): Promise<Work[]> {
    const instead = this.fetchedInstead.splice(0, count);
    return instead.length < count ? [...instead, ...(await this.fetch(count - instead.length))] : instead;
  }

  /** Stops fetching and renewing; a wait in progress ends at once. Call once what is held is settled. */
  async close(): Promise<void> {
    this.closing = true;
    this.wake?.();
    clearInterval(this.renewTimer);
    await this.worker.close();
    await this.queue.close();
  }

  /** The job as work; one this worker cannot read (another protocol, a malformed job) fails at once, with the reason. */
  private async read(job: Job<JobData>): Promise<Work | undefined> {
    const read = readJobData(job.data);
    if (!('problem' in read)) {
      const bulk = (job.opts.priority ?? 0) > 0;
      return { ...read, id: job.id!, bulk, job: Promise.resolve(job) };
    }
    const { problem } = read;
    this.logger.warn({ jobId: job.id, problem }, 'job failed unread');
    await job
      .moveToFailed(
        new Error(encodeJobFailure({ error: problem, error_type: 'internal' })),
        this.options.workerId,
        false,
      )
      .catch(() => {});
    return undefined;
  }

  /**
   * Work from the copy of its job that a notice carried (WorkNotice's `job`), started while the job
   * is fetched: a lone request does not wait for the fetch's round trip before its model call. None
   * where no copy was heard while idle, or it cannot be read (then the job is fetched and read as any).
   */
  private startAhead(): Work | undefined {
    const ahead = this.ahead;
    this.ahead = undefined;
    if (!ahead) return undefined;
    const read = readJobData(ahead.data);
    if ('problem' in read) return undefined;
    // Counted as fetched from now: the consumer's look for more work must not fetch it too.
    this.announcements.fetched(1, 1);
    return { ...read, id: ahead.id, bulk: false, job: this.fetchAhead(ahead.id) };
  }

  /**
   * The job of work started ahead, fetched. The fetch may bring an older job that nobody announced
   * instead, or none (the job is gone, or its add, which the notice need not wait for, has not run
   * yet): then the work's outcomes are dropped, a job fetched is handed out next, and the worker
   * fetches again: the job started ahead, if it waits, is fetched and run as any other.
   */
  private async fetchAhead(id: string): Promise<Job<JobData> | undefined> {
    try {
      const job = await this.worker.getNextJob(this.options.workerId, { block: false });
      if (job?.id === id) return job;
      if (job) {
        const work = await this.read(job);
        if (work) this.fetchedInstead.push(work);
      } else this.announcements.fetched(1, 0);
    } catch (err) {
      this.logger.warn({ jobId: id, err: String(err) }, 'fetching a job started ahead failed; it waits in the queue');
    }
    this.announcements.heard(1, true);
    this.wake?.();
    return undefined;
  }

  /** Until a notice comes, the poll period passes, or the intake closes. */
  private async idle(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      this.wake = resolve;
      timer = setTimeout(resolve, IDLE_POLL_MS);
    });
    clearTimeout(timer);
    this.wake = undefined;
  }

  /** Up to `count` jobs, fetched together; `polled`: no notice announced them. */
  private async fetch(count: number, polled = false): Promise<Work[]> {
    const jobs = await Promise.all(
      Array.from({ length: count }, () => this.worker.getNextJob(this.options.workerId, { block: false })),
    );
    const found = jobs.filter((job) => job !== undefined);
    this.announcements.fetched(count, found.length, polled);
    const works = await Promise.all(found.map((job) => this.read(job)));
    return works.filter((work) => work !== undefined);
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

/**
 * What work takes from a job's data, or why this worker cannot read it (a malformed job, another
 * protocol): the same for a fetched job and for a notice's copy of one.
 */
function readJobData(raw: unknown): Pick<Work, 'requests' | 'replyTo' | 'tellTaken' | 'keepMs'> | { problem: string } {
  const data = jobDataSchema.safeParse(raw);
  if (!data.success) return { problem: `unreadable job: ${describeIssues(data.error, 'data')}` };
  const { protocol, requests, replyTo, tellTaken, keepMs } = data.data;
  if (protocol !== PROTOCOL)
    return { problem: `the job is of wire protocol ${protocol}; this worker speaks ${PROTOCOL}` };
  return { requests, replyTo, tellTaken, keepMs };
}
