/**
 * Talks to a model's queue as a gateway would (enqueue, then wait on a reply channel), so a test
 * can fill the queue before a worker starts and see exactly how the worker batches it.
 */
import { randomUUID } from 'node:crypto';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import {
  PROTOCOL,
  readResultMessage,
  type JobData,
  type ReadRequestOutcome,
  type RequestOutcome,
  type TaskParameters,
  type WorkNotice,
} from '@tserve/contract';
import { JOB_NAME, JOB_OPTIONS, QUEUE_STREAMS, keys, queueNameFor } from '@tserve/queue';

/** An outcome as the worker had it: spread, its outputs are parsed (readResultMessage), and their JSON left out. */
const withOutputs = ({ outputsJson: _json, ...outcome }: ReadRequestOutcome): RequestOutcome => outcome;

export class QueueClient {
  private readonly redis: Redis;
  private readonly subscriber: Redis;
  private readonly queue: Queue;
  private readonly channel: string;
  private readonly workChannel: string;
  private readonly outcomes = new Map<string, RequestOutcome>();
  /** Several waits for one request may be pending; each is told, and each clears its own timer. */
  private readonly waiters = new Map<string, Array<(o: RequestOutcome) => void>>();

  constructor(redisUrl: string, prefix: string, model: string) {
    this.redis = new Redis(redisUrl, { maxRetriesPerRequest: null });
    this.subscriber = new Redis(redisUrl, { maxRetriesPerRequest: null });
    this.queue = new Queue(queueNameFor(model), {
      connection: this.redis,
      prefix,
      defaultJobOptions: JOB_OPTIONS,
      streams: QUEUE_STREAMS,
    });
    this.channel = keys.results(prefix, `test-${randomUUID()}`);
    this.workChannel = keys.work(prefix, model);
    this.subscriber.on('messageBuffer', (_c: Buffer, message: Buffer) => {
      const parsed = readResultMessage(message);
      if (!parsed) throw new Error(`unreadable result message: ${message.toString('utf8', 0, 200)}`);
      if (parsed.kind !== 'outcome') return;
      for (const outcome of parsed.outcomes.map(withOutputs)) {
        this.outcomes.set(outcome.id, outcome);
        for (const notify of this.waiters.get(outcome.id) ?? []) notify(outcome);
        this.waiters.delete(outcome.id);
      }
    });
  }

  async start(): Promise<void> {
    await this.subscriber.subscribe(this.channel);
  }

  /** Enqueues one request as a job of its own; the job id is the request id. */
  async add(inputs: string[], parameters: TaskParameters = {}, deadlineInMs = 60_000): Promise<string> {
    const [id] = await this.addJob([{ inputs, parameters, deadlineInMs }]);
    return id;
  }

  /**
   * Enqueues several requests as one job, as a gateway coalesces them, and announces it on the
   * model's work channel as a gateway does (unless `announce` is false: a notice lost on the way);
   * returns their ids (the first is the job's). `batchClass`: in the batch class, as a gateway adds
   * `x-priority: batch` requests (any BullMQ priority above 0).
   */
  async addJob(
    requests: Array<{ inputs: string[]; parameters?: TaskParameters; deadlineInMs?: number }>,
    announce = true,
    batchClass = false,
  ): Promise<string[]> {
    const now = Date.now();
    const data: JobData = {
      kind: 'job',
      protocol: PROTOCOL,
      replyTo: this.channel,
      tellTaken: false,
      keepMs: 10_000,
      requests: requests.map((r) => ({
        id: randomUUID(),
        inputs: r.inputs,
        parameters: r.parameters ?? {},
        deadline: now + (r.deadlineInMs ?? 60_000),
        enqueuedAt: now,
      })),
    };
    await this.queue.add(JOB_NAME, data, { jobId: data.requests[0].id, ...(batchClass ? { priority: 1 } : {}) });
    const notice: WorkNotice = { kind: 'work', jobs: 1, priority: batchClass ? 'batch' : 'interactive' };
    if (announce) await this.redis.publish(this.workChannel, JSON.stringify(notice));
    return data.requests.map((r) => r.id);
  }

  outcome(id: string, timeoutMs = 30_000): Promise<RequestOutcome> {
    const known = this.outcomes.get(id);
    if (known) return Promise.resolve(known);
    return new Promise((resolve, reject) => {
      const notify = (o: RequestOutcome) => {
        clearTimeout(timer);
        resolve(o);
      };
      const timer = setTimeout(() => {
        this.waiters.set(
          id,
          (this.waiters.get(id) ?? []).filter((n) => n !== notify),
        );
        reject(new Error(`no outcome for request ${id} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.set(id, [...(this.waiters.get(id) ?? []), notify]);
    });
  }

  jobState(id: string): Promise<string> {
    return this.queue.getJobState(id);
  }

  async close(): Promise<void> {
    await this.queue.close();
    this.subscriber.disconnect();
    this.redis.disconnect();
  }
}

/** A text of exactly `tokens` tokens for the BERT tokenizers of the replicas ([CLS] + n × "a" + [SEP]). */
export function textOfTokens(tokens: number, word = 'a'): string {
  return Array.from({ length: tokens - 2 }, () => word).join(' ');
}
