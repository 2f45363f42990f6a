import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import {
  BULK,
  inGroups,
  noticeCopy,
  PROTOCOL,
  sequenceCount,
  textLength,
  type CancelNotice,
  type JobData,
  type Priority,
  type QueuedRequest,
  type WorkNotice,
} from '@tserve/contract';
import { JOB_NAME, keys } from '@tserve/queue';

/**
 * Most characters of text one enqueue sends (at most three bytes each in UTF-8), whatever waits: a
 * burst of requests near MAX_BODY_BYTES would otherwise go as one Redis command of a gigabyte, past
 * what a string in Node or a command in Redis may hold. What is left goes in the next enqueue.
 */
export const MOST_CHARS_PER_ENQUEUE = 4_000_000;

/** One job to enqueue: requests for one model, in arrival order. Its id is its first request's. */
export interface CoalescedJob {
  id: string;
  requests: QueuedRequest[];
  /** The worker that takes it is asked to say so: requests that arrive meanwhile are held back behind it. */
  tellTaken: boolean;
}

/** A request taken back before it was sent (deadline or client gone): its `submit` rejects with this. */
export class Withdrawn extends Error {}

interface Entry {
  request: QueuedRequest;
  /** With the id of the job that carries the request, once it is in Redis. */
  resolve: (jobId: string) => void;
  reject: (err: unknown) => void;
}

interface Lane {
  model: string;
  priority: Priority;
  waiting: Entry[];
  sending: boolean;
  /** Jobs this lane sent that no worker has taken yet, as far as this gateway has heard. */
  untaken: Set<string>;
  /** Sends the waiting requests anyway if a worker's word that it took the jobs is lost. */
  graceTimer?: NodeJS.Timeout;
  /** Most sequences in one job: the model's workers' batch size, as the last request submitted found it. */
  jobSequences: number;
}

/** What a coalescer works with. */
export interface CoalescerParts {
  /** Where the jobs go: the JobSender. */
  sender: Pick<JobSender, 'enqueue'>;
  /** This gateway's requests for a model accepted and not yet answered (the queue depth). */
  depth: { own(model: string): number };
  /** How long waiting requests stay held behind a job whose taking no worker has told of. */
  graceMs: number;
}

/** Requests coalesce per model and class: a job has one priority in the queue. */
const laneKey = (model: string, priority: Priority) => `${priority}\n${model}`;

/**
 * Coalesces a model's requests into as few jobs as the load allows. No timer delays a request: one
 * that finds its model's lane idle is sent at once, alone. Requests that arrive while the lane's
 * last job is still on its way to Redis, or not yet running on a worker, wait here and then go out
 * together: sent earlier, they would wait in Redis for that worker's next batch all the same, and
 * under load a job carries many requests, so the Redis cost of a job (tens of commands inside
 * BullMQ's scripts) is shared by all of them. Workers say when a batch holding a job starts
 * (`taken`); if that word is lost, the job's outcome says it instead, and failing both, `graceMs`
 * later the waiting requests go out regardless.
 *
 * The word is asked for only when the gateway has other requests for the model outstanding as a job
 * goes out: only then is one likely to arrive while the job waits. A lone client's requests each find
 * the model idle, and the word would only wake Redis and this gateway while the model runs (c=1 was
 * faster without it); a request that does arrive behind a job sent without it goes out at once, as
 * its own job, and asks for the word itself.
 */
export class EnqueueCoalescer {
  private readonly lanes = new Map<string, Lane>();
  /** The lane of each job not yet taken. */
  private readonly laneOfJob = new Map<string, string>();

  constructor(private readonly parts: CoalescerParts) {}

  /**
   * Resolves with the id of the job that carries the request, once it is in Redis. `jobSequences`:
   * most sequences one job of the model carries, its workers' batch size, so that a job never spans
   * two batches.
   */
  submit(model: string, request: QueuedRequest, priority: Priority, jobSequences: number): Promise<string> {
    const key = laneKey(model, priority);
    const lane: Lane = this.lanes.get(key) ?? {
      model,
      priority,
      waiting: [],
      sending: false,
      untaken: new Set(),
      jobSequences,
    };
    lane.jobSequences = jobSequences;
    this.lanes.set(key, lane);
    const sent = new Promise<string>((resolve, reject) => lane.waiting.push({ request, resolve, reject }));
    this.pump(key, lane);
    return sent;
  }

  /** A worker took these jobs from the queue: the requests waiting behind them may go. Unknown ids are ignored. */
  taken(jobIds: string[]): void {
    for (const id of jobIds) {
      const key = this.laneOfJob.get(id);
      if (key === undefined) continue;
      this.laneOfJob.delete(id);
      const lane = this.lanes.get(key);
      if (!lane) continue;
      lane.untaken.delete(id);
      this.pump(key, lane);
    }
  }

  /** Takes a request back if it has not been sent yet; true if it was still here. */
  withdraw(model: string, requestId: string, priority: Priority = 'interactive'): boolean {
    const key = laneKey(model, priority);
    const lane = this.lanes.get(key);
    const index = lane?.waiting.findIndex((e) => e.request.id === requestId) ?? -1;
    if (!lane || index < 0) return false;
    const [entry] = lane.waiting.splice(index, 1);
    entry.reject(new Withdrawn());
    this.pump(key, lane);
    return true;
  }

  /** Requests held here, not yet sent, per model. */
  held(): Map<string, number> {
    const held = new Map<string, number>();
    for (const lane of this.lanes.values())
      if (lane.waiting.length) held.set(lane.model, (held.get(lane.model) ?? 0) + lane.waiting.length);
    return held;
  }

  /** Sends what waits if the lane is free; otherwise makes sure the grace timer runs; drops an empty lane. */
  private pump(key: string, lane: Lane): void {
    if (lane.sending) return;
    if (lane.waiting.length > 0 && lane.untaken.size === 0) {
      void this.send(key, lane);
      return;
    }
    // Here either nothing waits, or what waits is held behind untaken jobs.
    if (lane.waiting.length === 0) {
      clearTimeout(lane.graceTimer);
      lane.graceTimer = undefined;
    } else {
      lane.graceTimer ??= setTimeout(() => {
        lane.graceTimer = undefined;
        this.forgetUntaken(lane);
        this.pump(key, lane);
      }, this.parts.graceMs);
    }
    if (lane.waiting.length === 0 && lane.untaken.size === 0) this.lanes.delete(key);
  }

  private forgetUntaken(lane: Lane): void {
    for (const id of lane.untaken) this.laneOfJob.delete(id);
    lane.untaken.clear();
  }

  private async send(key: string, lane: Lane): Promise<void> {
    lane.sending = true;
    clearTimeout(lane.graceTimer);
    lane.graceTimer = undefined;
    const entries = lane.waiting.splice(0, oneEnqueue(lane.waiting, MOST_CHARS_PER_ENQUEUE));
    const jobs = splitIntoJobs(entries, lane.jobSequences).map((job) => ({
      id: job[0].request.id,
      entries: job,
    }));
    // Others outstanding beyond those going out now: the worker is asked to say when it takes them.
    const tellTaken = this.parts.depth.own(lane.model) > entries.length;
    // Marked untaken before they are sent: a worker's word that it took one may overtake the enqueue's reply.
    if (tellTaken) {
      for (const { id } of jobs) {
        lane.untaken.add(id);
        this.laneOfJob.set(id, key);
      }
    }
    try {
      await this.parts.sender.enqueue(
        lane.model,
        lane.priority,
        jobs.map((job) => ({ id: job.id, requests: job.entries.map((e) => e.request), tellTaken })),
      );
      for (const job of jobs) for (const e of job.entries) e.resolve(job.id);
    } catch (err) {
      for (const { id } of jobs) {
        lane.untaken.delete(id);
        this.laneOfJob.delete(id);
      }
      for (const e of entries) e.reject(err);
    }
    lane.sending = false;
    this.pump(key, lane);
  }
}

/** BullMQ's priority for bulk jobs; interactive ones carry none (0), which BullMQ serves first. */
const BULK_JOB_PRIORITY = 1;

/** A job's name, which the dashboard shows: how many requests it carries. */
const jobName = (requests: number) => `${JOB_NAME} ×${requests}`;

export interface SenderParts {
  /** The gateway's fail-fast command connection, which publishes the notices: its queues' too (queues.ts). */
  redis: Redis;
  queues: { get(model: string): Queue };
  prefix: string;
  /** This gateway's result channel, where workers publish the jobs' outcomes. */
  replyTo: string;
  /** How long a finished job's outcomes are kept (outcomesKeptMs), which the worker records them for. */
  keepMs: number;
  /** Every Redis write of a request goes through the breaker, which fails fast while Redis is down. */
  breaker: { guard<T>(call: () => Promise<T>): Promise<T> };
}

/** What goes from this gateway to a model's workers through Redis: jobs, and the names of requests to skip. */
export class JobSender {
  /** Jobs enqueued per model: with the requests answered, how many requests a job carries. */
  readonly enqueued = new Map<string, number>();

  constructor(private readonly parts: SenderParts) {}

  /**
   * Adds jobs to a model's queue; several go in one call, one round trip. Interactive jobs go to the
   * wait list, batch jobs to BullMQ's prioritized set, which workers take from only when the wait
   * list is empty: interactive work overtakes queued bulk work at no extra Redis cost.
   */
  async enqueue(model: string, priority: Priority, jobs: CoalescedJob[]): Promise<void> {
    const { redis, queues, prefix, replyTo, keepMs, breaker } = this.parts;
    const queue = queues.get(model);
    const entries = jobs.map((job) => ({
      name: jobName(job.requests.length),
      data: {
        kind: 'job',
        protocol: PROTOCOL,
        requests: job.requests,
        replyTo,
        tellTaken: job.tellTaken,
        keepMs,
      } satisfies JobData,
      opts: priority === BULK ? { jobId: job.id, priority: BULK_JOB_PRIORITY } : { jobId: job.id },
    }));
    const added = entries.map((e) => ({ id: e.opts.jobId, data: e.data }));
    const notice: WorkNotice = { kind: 'work', jobs: entries.length, priority, ...noticeCopy(priority, added) };
    const announce = () => void redis.publish(keys.work(prefix, model), JSON.stringify(notice)).catch(() => {});
    await breaker.guard(async () => {
      await queue.waitUntilReady(); // a queue's first use asks Redis its version before its add
      const adding =
        entries.length === 1 ? queue.add(entries[0].name, entries[0].data, entries[0].opts) : queue.addBulk(entries);
      // A notice with a copy of its job need not wait for the add's reply (its worker starts the copy
      // and fetches the job meanwhile): it goes a turn after BullMQ writes the add, on the same
      // connection, whose commands Redis runs in order. An add late or failed all the same: protocol.md.
      if (notice.job) setImmediate(announce);
      await adding;
    });
    this.enqueued.set(model, (this.enqueued.get(model) ?? 0) + jobs.length);
    // Other notices once Redis holds the jobs: a worker woken ahead of them would find nothing, and
    // wait for its next poll. Not awaited: the request waits for its outcome, not for the notice.
    if (!notice.job) announce();
  }

  /** Names a queued request to the model's workers, once its job is in Redis: they skip it if not yet run. */
  cancel(model: string, request: QueuedRequest, sent: Promise<string>): void {
    const notice: CancelNotice = { kind: 'cancel', ids: [request.id], deadline: request.deadline };
    void sent
      .then(() => this.parts.redis.publish(keys.cancellations(this.parts.prefix, model), JSON.stringify(notice)))
      .catch(() => {});
  }
}

/** How many of the entries, from the first, one enqueue sends: those within `maxChars` of text, and always the first. */
export function oneEnqueue(entries: Array<{ request: Pick<QueuedRequest, 'inputs'> }>, maxChars: number): number {
  let chars = 0;
  for (let i = 0; i < entries.length; i++) {
    chars += textLength(entries[i].request);
    if (chars > maxChars && i > 0) return i;
  }
  return entries.length;
}

/** Groups entries in order into jobs of at most `max` sequences; a request larger than that goes alone. */
export function splitIntoJobs<E extends { request: Pick<QueuedRequest, 'inputs' | 'sequences'> }>(
  entries: E[],
  max: number,
): E[][] {
  return inGroups(entries, (entry) => sequenceCount(entry.request), max);
}
