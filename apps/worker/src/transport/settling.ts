import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import {
  encodeRecordedOutcome,
  encodeResultMessage,
  OUTCOME_MESSAGE_MAX_BYTES,
  type JobOutcome,
  type JobRecorded,
  type JobsTaken,
  type QueuedRequest,
  type RequestOutcome,
} from '@tserve/contract';
import { keys } from '@tserve/queue';
import type { Cancellations } from '../pipeline/cancellations.js';
import type { BatchReport } from '../pipeline/prepared-batch.js';
import type { OutcomeSink } from '../pipeline/requests.js';
import type { Work } from './work.js';

/** A job this worker holds: its lock is renewed until every one of its requests has an outcome. */
interface HeldJob {
  work: Work;
  outcomes: Array<RequestOutcome | undefined>;
  remaining: number;
}

export interface SettlingOptions {
  prefix: string;
  model: string;
  /** The worker's lock token: a job is recorded as completed under it. */
  token: string;
}

/**
 * Where the outcomes of the jobs this worker holds go. They are gathered by job; a job is settled
 * once all its requests have outcomes: published to the gateway waiting for it (clients are
 * waiting) first, then recorded as the BullMQ job's return value for the gateway's fallback read.
 * Outcomes too large for one message are recorded first, under a key of their own,
 * and the gateway is then told to read them (JobRecorded).
 */
export class Settling implements OutcomeSink {
  /** Held jobs by job id, and the job of each of their requests. */
  private readonly held = new Map<string, HeldJob>();
  private readonly jobOfRequest = new Map<string, { held: HeldJob; index: number }>();
  private readonly settling = new Set<Promise<void>>();
  /** Taken jobs the gateways that sent them asked to hear of, not yet told: job ids by reply channel. */
  private readonly untold = new Map<string, string[]>();

  constructor(
    /** Publishes outcomes and records them; its commands are pipelined. */
    private readonly publisher: Redis,
    private readonly cancellations: Cancellations,
    private readonly options: SettlingOptions,
    private readonly logger: Logger,
  ) {}

  /** Takes on fetched work: its requests' outcomes are expected here. */
  hold(works: Work[]): void {
    for (const work of works) {
      const held: HeldJob = {
        work,
        outcomes: new Array<RequestOutcome | undefined>(work.requests.length),
        remaining: work.requests.length,
      };
      this.held.set(work.id, held);
      work.requests.forEach((request, index) => this.jobOfRequest.set(request.id, { held, index }));
      if (work.tellTaken) {
        const ids = this.untold.get(work.replyTo) ?? [];
        ids.push(work.id);
        this.untold.set(work.replyTo, ids);
      }
    }
  }

  /**
   * Tells each gateway, in one message, which of its jobs held since the last call were taken; it held
   * back what arrived since and now sends it as one job. The consumer calls this as a batch starts on
   * the model rather than at fetch: told at fetch, a gateway sends at once a small job of what arrived
   * meanwhile, which waits in Redis for the next batch with everything after it held back behind it
   * anyway; told at the start, it gathers all of that into one job (measured: more requests per job
   * and fewer Redis commands per request under load, latency no worse; bench/HISTORY.md). A
   * busy worker with peers also calls it at fetch (see Consumer).
   */
  tellTaken(): void {
    for (const [channel, ids] of this.untold) {
      const message: JobsTaken = { kind: 'taken', jobs: ids };
      this.publisher
        .publish(channel, encodeResultMessage(message))
        .catch((err: unknown) => this.logger.debug({ err: String(err) }, 'telling a gateway of taken jobs failed'));
    }
    this.untold.clear();
  }

  /** Ids of the jobs still waiting for outcomes: their locks must be kept. */
  heldJobIds(): string[] {
    return [...this.held.keys()];
  }

  /** A request's outcome; its job is settled with the last one. Requests not held here are ignored. */
  record(request: QueuedRequest, outcome: RequestOutcome): void {
    const place = this.jobOfRequest.get(request.id);
    if (!place) return;
    this.jobOfRequest.delete(request.id);
    this.cancellations.forget(request.id);
    place.held.outcomes[place.index] = outcome;
    if (--place.held.remaining === 0) this.settle(place.held);
  }

  batchDone(report: BatchReport, jobs: number): void {
    this.logger.debug(
      { jobs, calls: report.callSizes, expired: report.expired, abandoned: report.abandoned },
      'batch done',
    );
  }

  /** Waits for the settlements under way. */
  async drain(): Promise<void> {
    await Promise.allSettled(this.settling);
  }

  /**
   * Publishes a job's outcome to its gateway, then records it for the fallback read. The record waits
   * for the publish's reply: sent together, the record (BullMQ's completion, the costliest script of
   * a job) was run by Redis first, and the client waited for it.
   */
  private async publishAndRecord(
    work: Work,
    result: JobOutcome,
    record: Buffer,
  ): Promise<Array<PromiseSettledResult<unknown>>> {
    const [published] = await Promise.allSettled([this.publisher.publish(work.replyTo, record)]);
    const [stored] = await Promise.allSettled([this.store(work, result)]);
    return [published, stored];
  }

  /**
   * Stores the record of an outcome too large to publish, then tells the gateway to read it
   * (JobRecorded), step by step so that what it is told of is there: the record in a key of its own,
   * then the job completed as recorded, then the message.
   */
  private async recordThenTell(work: Work, record: Buffer): Promise<Array<PromiseSettledResult<unknown>>> {
    const { prefix, model } = this.options;
    const recorded: JobRecorded = { kind: 'recorded', job: work.id, model, requests: work.requests.map((r) => r.id) };
    const steps: Array<() => Promise<unknown>> = [
      () => this.publisher.set(keys.jobOutcome(prefix, work.id), record, 'PX', work.keepMs),
      () => this.store(work, recorded),
      () => this.publisher.publish(work.replyTo, encodeResultMessage(recorded)),
    ];
    const settled: Array<PromiseSettledResult<unknown>> = [];
    for (const step of steps) settled.push(...(await Promise.allSettled([step()])));
    return settled;
  }

  /** Completes the job with `returned`, where the gateway's fallback read finds it. */
  private async store(work: Work, returned: JobOutcome | JobRecorded): Promise<unknown> {
    return (await work.job)?.moveToCompleted(returned, this.options.token, false);
  }

  private settle(held: HeldJob): void {
    const { work } = held;
    this.held.delete(work.id);
    const result: JobOutcome = {
      kind: 'outcome',
      job: work.id,
      model: this.options.model,
      outcomes: held.outcomes as RequestOutcome[],
    };
    // Written once, as the record a gateway reads: published where it fits in a message, else stored.
    const record = encodeRecordedOutcome(result);
    const publishable = record.length <= OUTCOME_MESSAGE_MAX_BYTES;
    const settling = (async () => {
      if (!(await work.job)) {
        this.logger.debug({ jobId: work.id }, 'job started ahead of its fetch and not fetched: left to the queue');
        return;
      }
      const settled = publishable
        ? await this.publishAndRecord(work, result, record)
        : await this.recordThenTell(work, record);
      for (const r of settled) {
        if (r.status === 'rejected') this.logger.warn({ jobId: work.id, err: String(r.reason) }, 'settling job failed');
      }
      // Failures get their type only: messages may quote the user's input.
      const failed = result.outcomes.filter((o) => !o.ok);
      this.logger.debug(
        {
          jobId: work.id,
          requests: result.outcomes.map((o) => o.id),
          failed: failed.map((o) => (o.ok ? undefined : o.error.error_type)),
        },
        'job settled',
      );
    })();
    this.settling.add(settling);
    void settling.finally(() => this.settling.delete(settling));
  }
}
