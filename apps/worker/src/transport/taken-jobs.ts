import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { encodeResultMessage, type JobsTaken, type QueuedRequest, type RequestOutcome } from '@tserve/contract';
import type { Cancellations } from './cancellations.js';
import type { Intake } from './intake.js';
import type { Settling } from './settling.js';
import type { Work } from './work.js';

/** A job this worker took and has not settled: its lock is kept until every one of its requests has an outcome. */
interface Unsettled {
  work: Work;
  outcomes: Array<RequestOutcome | undefined>;
  remaining: number;
}

export interface TakenJobsParts {
  /** Takes jobs from the model's queue, and keeps the locks of those taken and not yet settled. */
  intake: Intake;
  /** Settles a job once every one of its requests has an outcome. */
  settling: Settling;
  /** Tells gateways their jobs are taken (JobsTaken); its commands are pipelined. */
  publisher: Redis;
  /** A request answered here is one whose cancellation need not be remembered. */
  cancellations: Cancellations;
  logger: Logger;
}

/**
 * The jobs this worker has taken, from taking to settling, in one owner (the pipeline's TakenJobs,
 * pipeline/jobs.ts): a job taken from the intake is tracked, its lock renewed by the intake until it
 * is settled, the gateway that asked is told it is taken (`sendTaken`), and it is settled once every
 * one of its requests has an outcome (`accept`). BullMQ's stalled-job check returns the jobs of a
 * worker that died to the queue, every request in them.
 */
export class TakenJobs {
  private readonly unsettled = new Map<string, Unsettled>();
  private readonly jobOfRequest = new Map<string, { job: Unsettled; index: number }>();
  private readonly settlements = new Set<Promise<void>>();
  /** Jobs taken whose gateways asked to be told (`tellTaken`) and are not yet: job ids by reply channel. */
  private readonly untold = new Map<string, string[]>();

  constructor(private readonly parts: TakenJobsParts) {}

  /** Starts taking jobs: the intake renews the locks of those not yet settled, in one call for all. */
  start(): void {
    this.parts.intake.start(() => this.jobIds());
  }

  async next(): Promise<Work | undefined> {
    const work = await this.parts.intake.next();
    if (work) this.track([work]);
    return work;
  }

  waiting(): Promise<number> {
    return this.parts.intake.waiting();
  }

  async take(count: number): Promise<Work[]> {
    const works = await this.parts.intake.take(count);
    this.track(works);
    return works;
  }

  interactiveWaiting(): Promise<number> {
    return this.parts.intake.interactiveWaiting();
  }

  /** Tracks taken work until it is settled: its requests' outcomes are expected here. */
  track(works: Work[]): void {
    for (const work of works) {
      const job: Unsettled = {
        work,
        outcomes: new Array<RequestOutcome | undefined>(work.requests.length),
        remaining: work.requests.length,
      };
      this.unsettled.set(work.id, job);
      work.requests.forEach((request, index) => this.jobOfRequest.set(request.id, { job, index }));
      if (work.tellTaken) {
        const ids = this.untold.get(work.replyTo) ?? [];
        ids.push(work.id);
        this.untold.set(work.replyTo, ids);
      }
    }
  }

  /**
   * Tells each gateway, in one message, which of its jobs taken since the last call are taken; it
   * held back what arrived since and now sends it as one job. The consumer calls this as a model
   * batch starts rather than at fetch: told at fetch, a gateway sends at once a small job of what
   * arrived meanwhile, which waits in Redis for the next batch with everything after it held back
   * behind it anyway; told at the start, it gathers all of that into one job (measured: more
   * requests per job and fewer Redis commands per request under load, latency no worse;
   * bench/HISTORY.md). A busy worker with peers also calls it at fetch (see Consumer).
   */
  sendTaken(): void {
    for (const [channel, ids] of this.untold) {
      const message: JobsTaken = { kind: 'taken', jobs: ids };
      this.parts.publisher
        .publish(channel, encodeResultMessage(message))
        .catch((err: unknown) =>
          this.parts.logger.debug({ err: String(err) }, 'telling a gateway of taken jobs failed'),
        );
    }
    this.untold.clear();
  }

  /** Ids of the jobs taken and not yet settled: their locks must be kept. */
  jobIds(): string[] {
    return [...this.unsettled.keys()];
  }

  /** A request's outcome; its job is settled with the last one. Requests of no job taken here are ignored. */
  accept(request: QueuedRequest, outcome: RequestOutcome): void {
    const place = this.jobOfRequest.get(request.id);
    if (!place) return;
    this.jobOfRequest.delete(request.id);
    this.parts.cancellations.forget(request.id);
    place.job.outcomes[place.index] = outcome;
    if (--place.job.remaining > 0) return;
    const { work, outcomes } = place.job;
    this.unsettled.delete(work.id);
    const settlement = this.parts.settling.settle(work, outcomes as RequestOutcome[]);
    this.settlements.add(settlement);
    void settlement.finally(() => this.settlements.delete(settlement));
  }

  /** Waits for the settlements under way. */
  async drain(): Promise<void> {
    await Promise.allSettled(this.settlements);
  }

  /** Stops taking jobs once the settlements under way are done, and lets go of the queue. */
  async close(): Promise<void> {
    await this.drain();
    await this.parts.intake.close();
  }
}
