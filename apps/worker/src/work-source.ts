import type { Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { DirectEntry, DirectState, InferenceJobData, LoneDirectEntry } from '@tserve/contract';
import { keys } from '@tserve/queue';
import type { JobSource } from './batcher.js';
import { workOfDirect, workOfJob, type DirectWork, type Work } from './work.js';

/**
 * Jobs waiting (the wait list, interactive, and the prioritized set, batch class) plus direct
 * entries waiting. With no job waiting it also drops BullMQ's base wake-up marker: BullMQ re-adds
 * it each time a job goes active, so that another worker looks for more, and with nothing waiting it
 * would only wake this worker for a fetch that comes back empty (about ten commands inside Redis).
 * Atomic, so a job added later leaves a fresh marker: no wake-up is lost. Only the base marker ("0")
 * goes; markers of delayed jobs stay. Answers both counts.
 */
const WAITING_OR_IDLE = `
local jobs = redis.call('LLEN', KEYS[1]) + redis.call('ZCARD', KEYS[3])
if jobs == 0 then redis.call('ZREM', KEYS[2], '0') end
return {jobs, redis.call('ZCARD', KEYS[4])}`;

export interface WorkSourceOptions {
  prefix: string;
  model: string;
  /** This worker's id: its lock token, and the name it leaves on the direct entries it takes. */
  workerId: string;
  /** Longest an idle blocking wait lasts before it looks at the queue anyway (s). */
  idleSeconds: number;
}

/**
 * Where the consumer's work comes from: the model's BullMQ queue and its set of direct entries
 * (see the gateway's direct-requests.ts). An idle worker waits for both in one blocking call, on
 * the direct set and BullMQ's wake-up marker together, so a direct entry costs no fetch of an
 * empty queue. A direct entry taken is marked with this worker's id right away: a gateway that
 * finds that mark while this worker's announcement is gone sends the requests again as a job.
 */
export class WorkSource implements JobSource<Work> {
  private readonly directKey: string;
  /** Direct entries waiting at the last count: `take` pops that many at most, and does not ask when none did. */
  private directWaiting = 0;

  constructor(
    private readonly worker: Worker<InferenceJobData>,
    /** The worker's command connection. */
    private readonly connection: Redis,
    /** A connection of its own for the blocking wait, which holds it for seconds at a time. */
    private readonly blocking: Redis,
    /** Pipelined connection on which the taken marks go, ahead of the outcomes that replace them. */
    private readonly publisher: Redis,
    private readonly options: WorkSourceOptions,
    private readonly logger: Logger,
  ) {
    this.directKey = keys.directRequests(options.prefix, options.model);
  }

  async next(): Promise<Work | undefined> {
    const popped = await this.waitForWork();
    if (popped?.key === this.directKey) return this.takeDirect([popped.member])[0];
    // BullMQ's marker (a job may be waiting), or the wait timed out: BullMQ's own loop also fetches
    // then, which recovers from a marker that was lost.
    const job = await this.worker.getNextJob(this.options.workerId, { block: false });
    return job ? workOfJob(job) : undefined;
  }

  /**
   * A lone direct request the blocking wait popped reached an idle worker: whatever else is waiting
   * came within the same instant, and asking for it would cost the request a round trip (and a
   * script) before its model call. It joins the next batch instead, formed while this one runs.
   * Work taken while the model was busy is gathered after it anyway (see Consumer).
   */
  alone(work: Work): boolean {
    return work.job === undefined && work.requests.length === 1;
  }

  async waiting(): Promise<number> {
    const w = this.worker.keys;
    const [jobs, direct] = (await this.connection.eval(WAITING_OR_IDLE, 4, w.wait, w.marker, w.prioritized, this.directKey)) as [number, number];
    this.directWaiting = direct;
    return jobs + direct;
  }

  /** Interactive work waiting now: jobs in the wait list and direct entries. */
  async interactiveWaiting(): Promise<number> {
    const [jobs, direct] = await Promise.all([this.connection.llen(this.worker.keys.wait), this.connection.zcard(this.directKey)]);
    this.directWaiting = direct;
    return jobs + direct;
  }

  /** Direct entries first (they are interactive), then jobs, interactive before batch class. */
  async take(count: number): Promise<Work[]> {
    const taken: Work[] = [];
    const direct = Math.min(count, this.directWaiting);
    if (direct > 0) {
      const popped = await this.connection.zpopmin(this.directKey, direct);
      // ZPOPMIN answers member, score, member, score, …
      taken.push(...this.takeDirect(popped.filter((_, i) => i % 2 === 0)));
      this.directWaiting = 0;
    }
    const jobs = await Promise.all(Array.from({ length: count - taken.length }, () => this.worker.getNextJob(this.options.workerId, { block: false })));
    for (const job of jobs) if (job) taken.push(workOfJob(job));
    return taken;
  }

  /** Ends a blocking wait in progress (it then rejects); for stopping. */
  interrupt(): void {
    this.blocking.disconnect();
  }

  private takeDirect(members: string[]): Work[] {
    const works: Work[] = [];
    for (const member of members) {
      let work: DirectWork;
      try {
        work = workOfDirect(JSON.parse(member) as DirectEntry | LoneDirectEntry);
      } catch {
        this.logger.warn('unreadable direct entry skipped');
        continue;
      }
      const mark: DirectState = { takenBy: this.options.workerId };
      // Kept until its requests can no longer be waited for; its outcomes then replace it.
      const ttlMs = Math.max(0, ...work.requests.map((r) => r.deadline - Date.now())) + work.keepMs;
      this.publisher
        .set(keys.directState(this.options.prefix, work.id), JSON.stringify(mark), 'PX', ttlMs)
        .catch((err: unknown) => this.logger.warn({ entry: work.id, err: String(err) }, 'marking a direct entry taken failed'));
      works.push(work);
    }
    return works;
  }

  /**
   * One blocking wait on the direct set and BullMQ's marker. Raced against a watchdog, as BullMQ's
   * own wait is: ioredis re-sends a blocking command interrupted by a reconnect instead of failing
   * it, and the wait could otherwise hang after a connection reset; a stuck connection is reset.
   */
  private async waitForWork(): Promise<{ key: string; member: string } | undefined> {
    const pop = this.blocking.bzpopmin(this.directKey, this.worker.keys.marker, this.options.idleSeconds);
    pop.catch(() => {});
    let watchdog: NodeJS.Timeout | undefined;
    const stuck = new Promise<'stuck'>((resolve) => {
      watchdog = setTimeout(() => resolve('stuck'), this.options.idleSeconds * 1000 + 1000);
    });
    try {
      const result = await Promise.race([pop, stuck]);
      if (result === 'stuck') {
        this.blocking.disconnect(true);
        return undefined;
      }
      return result ? { key: result[0], member: result[1] } : undefined;
    } finally {
      clearTimeout(watchdog);
    }
  }
}
