import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import {
  encodeRecordedOutcome,
  encodeResultMessage,
  OUTCOME_MESSAGE_MAX_BYTES,
  type JobOutcome,
  type JobRecorded,
  type RequestOutcome,
} from '@tserve/contract';
import { keys } from '@tserve/queue';
import type { Work } from './work.js';

export interface SettlingOptions {
  prefix: string;
  model: string;
  /** The worker's lock token: a job is completed under it. */
  token: string;
}

/**
 * How a taken job is settled, once every one of its requests has an outcome (taken-jobs.ts). Its
 * outcome is written once, as its record (docs/protocol.md's glossary: `encodeRecordedOutcome`),
 * which is published to the gateway waiting for it (clients are waiting) first; then the BullMQ job
 * is completed with the outcome, for the gateway's fallback read. A record too large for one
 * message is stored under a key of its own first, the job completed as recorded there, and the
 * gateway then told to read it (JobRecorded).
 */
export class Settling {
  constructor(
    /** Publishes records, stores those too large to publish, and completes jobs; its commands are pipelined. */
    private readonly publisher: Redis,
    private readonly options: SettlingOptions,
    private readonly logger: Logger,
  ) {}

  /** Settles `work` with its requests' outcomes, in their order; failures are logged, never thrown. */
  async settle(work: Work, outcomes: RequestOutcome[]): Promise<void> {
    const outcome: JobOutcome = { kind: 'outcome', job: work.id, model: this.options.model, outcomes };
    // Written once, as a gateway reads it: published where it fits in a message, else stored.
    const record = encodeRecordedOutcome(outcome);
    if (!(await work.job)) {
      this.logger.debug({ jobId: work.id }, 'job started ahead of its fetch and not fetched: left to the queue');
      return;
    }
    const settled =
      record.length <= OUTCOME_MESSAGE_MAX_BYTES
        ? await this.publishThenComplete(work, outcome, record)
        : await this.storeThenTell(work, record);
    for (const r of settled) {
      if (r.status === 'rejected') this.logger.warn({ jobId: work.id, err: String(r.reason) }, 'settling job failed');
    }
    // Failures get their type only: messages may quote the user's input.
    const failed = outcomes.filter((o) => !o.ok);
    this.logger.debug(
      {
        jobId: work.id,
        requests: outcomes.map((o) => o.id),
        failed: failed.map((o) => (o.ok ? undefined : o.error.error_type)),
      },
      'job settled',
    );
  }

  /**
   * Publishes a job's record to its gateway, then completes the job with its outcome, for the
   * fallback read. The completion waits for the publish's reply: sent together, the completion
   * (BullMQ's costliest script of a job) was run by Redis first, and the client waited for it.
   */
  private async publishThenComplete(
    work: Work,
    outcome: JobOutcome,
    record: Buffer,
  ): Promise<Array<PromiseSettledResult<unknown>>> {
    const [published] = await Promise.allSettled([this.publisher.publish(work.replyTo, record)]);
    const [completed] = await Promise.allSettled([this.complete(work, outcome)]);
    return [published, completed];
  }

  /**
   * Stores a record too large to publish, then tells the gateway to read it (JobRecorded), step by
   * step so that what it is told of is there: the record in a key of its own, then the job completed
   * as recorded there, then the message.
   */
  private async storeThenTell(work: Work, record: Buffer): Promise<Array<PromiseSettledResult<unknown>>> {
    const { prefix, model } = this.options;
    const recorded: JobRecorded = { kind: 'recorded', job: work.id, model, requests: work.requests.map((r) => r.id) };
    const steps: Array<() => Promise<unknown>> = [
      () => this.publisher.set(keys.jobOutcome(prefix, work.id), record, 'PX', work.keepMs),
      () => this.complete(work, recorded),
      () => this.publisher.publish(work.replyTo, encodeResultMessage(recorded)),
    ];
    const settled: Array<PromiseSettledResult<unknown>> = [];
    for (const step of steps) settled.push(...(await Promise.allSettled([step()])));
    return settled;
  }

  /** Completes the BullMQ job with `returned`, where the gateway's fallback read finds it. */
  private async complete(work: Work, returned: JobOutcome | JobRecorded): Promise<unknown> {
    return (await work.job)?.moveToCompleted(returned, this.options.token, false);
  }
}
