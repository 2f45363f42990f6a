import { sequenceCount, type Priority, type QueuedRequest } from '@tserve/contract';

/** One job to enqueue: requests for one model, in arrival order. Its id is its first request's. */
export interface CoalescedJob {
  id: string;
  requests: QueuedRequest[];
}

/** Sends jobs for a model and class to Redis; several at once go in one round trip. */
export type Enqueue = (model: string, priority: Priority, jobs: CoalescedJob[]) => Promise<void>;

/** A request taken back before it was sent (deadline or client gone): its `submit` rejects with this. */
export class Withdrawn extends Error {}

interface Entry {
  request: QueuedRequest;
  resolve: (jobId: string) => void;
  reject: (err: unknown) => void;
}

interface Lane {
  model: string;
  priority: Priority;
  waiting: Entry[];
  sending: boolean;
}

/** Requests coalesce per model and class: a job has one priority in the queue. */
const laneKey = (model: string, priority: Priority) => `${priority}\n${model}`;

/**
 * Coalesces a model's requests into as few jobs as the load allows, with no timer: a request that
 * finds no enqueue in flight for its model is sent at once, alone; requests that arrive while one is
 * in flight wait for it and then go out together. Under load a job carries many requests, so the
 * Redis cost of a job (tens of commands inside BullMQ's scripts) is shared by all of them.
 */
export class EnqueueCoalescer {
  private readonly lanes = new Map<string, Lane>();

  constructor(
    private readonly enqueue: Enqueue,
    /** Most sequences in one job: a worker's batch size, so one job never spans two batches. */
    private readonly maxSequences: (model: string) => number,
  ) {}

  /** Resolves with the id of the job that carries the request, once it is in Redis. */
  submit(model: string, request: QueuedRequest, priority: Priority = 'interactive'): Promise<string> {
    const key = laneKey(model, priority);
    const lane = this.lanes.get(key) ?? { model, priority, waiting: [], sending: false };
    this.lanes.set(key, lane);
    const sent = new Promise<string>((resolve, reject) => lane.waiting.push({ request, resolve, reject }));
    if (!lane.sending) void this.send(key, lane);
    return sent;
  }

  /** Takes a request back if it has not been sent yet; true if it was still here. */
  withdraw(model: string, requestId: string, priority: Priority = 'interactive'): boolean {
    const lane = this.lanes.get(laneKey(model, priority));
    const index = lane?.waiting.findIndex((e) => e.request.id === requestId) ?? -1;
    if (!lane || index < 0) return false;
    const [entry] = lane.waiting.splice(index, 1);
    entry.reject(new Withdrawn());
    return true;
  }

  /** Requests waiting for the enqueue in flight, over all models. */
  get waiting(): number {
    let n = 0;
    for (const lane of this.lanes.values()) n += lane.waiting.length;
    return n;
  }

  private async send(key: string, lane: Lane): Promise<void> {
    lane.sending = true;
    while (lane.waiting.length > 0) {
      const entries = lane.waiting.splice(0);
      const jobs = splitIntoJobs(entries, this.maxSequences(lane.model));
      try {
        await this.enqueue(
          lane.model,
          lane.priority,
          jobs.map((job) => ({ id: job[0].request.id, requests: job.map((e) => e.request) })),
        );
        for (const job of jobs) for (const e of job) e.resolve(job[0].request.id);
      } catch (err) {
        for (const e of entries) e.reject(err);
      }
    }
    lane.sending = false;
    if (lane.waiting.length === 0) this.lanes.delete(key);
  }
}

/** Groups entries in order into jobs of at most `max` sequences; a request larger than that goes alone. */
export function splitIntoJobs<E extends { request: Pick<QueuedRequest, 'inputs' | 'sequences'> }>(entries: E[], max: number): E[][] {
  const jobs: E[][] = [];
  let current: E[] = [];
  let size = 0;
  for (const entry of entries) {
    const n = sequenceCount(entry.request);
    if (current.length > 0 && size + n > max) {
      jobs.push(current);
      current = [];
      size = 0;
    }
    current.push(entry);
    size += n;
  }
  if (current.length > 0) jobs.push(current);
  return jobs;
}
