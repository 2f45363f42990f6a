import type { Redis } from 'ioredis';
import type { DirectRequest, DirectState, JobOutcome, Priority, QueuedRequest } from '@tserve/contract';
import { keys } from '@tserve/queue';

/** A direct request this gateway sent and still waits for. */
export interface DirectTicket {
  model: string;
  request: QueuedRequest;
  /** Its entry in the model's set, as sent: removing it needs the exact member. */
  member: string;
  /** Fallback reads that found it neither queued nor held: one is a worker between popping it and saying so. */
  unaccounted: number;
}

/**
 * Whether what a lane sends goes as a direct request: one interactive request alone. Batch-class
 * work always goes as jobs, into BullMQ's prioritized set, so that interactive work overtakes it.
 */
export function goesDirect(priority: Priority, jobs: Array<{ requests: unknown[] }>): boolean {
  return priority === 'interactive' && jobs.length === 1 && jobs[0].requests.length === 1;
}

/** What the fallback read found of a direct request not answered within a poll period. */
export type DirectFate =
  | { outcome: JobOutcome }
  /** A live worker holds it: the answer is coming. */
  | { held: true }
  /** Still unaccounted for once: looked at again at the next read. */
  | { unknown: true }
  /** Nobody holds it (no worker took it in a whole period, or the one that did is gone): send it as a job. */
  | { orphaned: true };

/**
 * Lone requests sent straight to a model's workers: a request that finds its model's lane idle
 * (nothing of its model in flight from this gateway) is put in the model's sorted set of direct
 * requests, which idle workers block on together with BullMQ's wake-up marker. One request then
 * costs about 11 Redis commands (this ZADD; the worker's pop, its look for more work, its mark that
 * it took it, the taken and result messages and the stored outcome) instead of the 49 that a job
 * costs, most of them inside BullMQ's three scripts. Under load requests coalesce into BullMQ jobs
 * as before: a lane's next request waits for a worker's word that it took the last one, so at most
 * one direct request per gateway and model waits in the set at a time.
 *
 * What BullMQ gives a job, the fallback read gives a direct request: a request not answered within
 * a poll period is looked up, and if no live worker holds it (none took it in that time, or the one
 * that did died), the gateway takes it back and sends it as a job, where it is counted, shown on
 * the dashboard and recovered from a dead worker by BullMQ. Sent twice at worst, never lost.
 */
export class DirectRequests {
  constructor(
    /** The gateway's fail-fast connection. */
    private readonly redis: Redis,
    private readonly prefix: string,
    /** How long a worker keeps a request's outcome for the fallback read (ms). */
    private readonly keepMs: number,
    /** Whether a worker is live now, as the registry last read. */
    private readonly isLive: (workerId: string) => boolean,
  ) {}

  async send(model: string, request: QueuedRequest, replyTo: string): Promise<DirectTicket> {
    const member = JSON.stringify({ request, replyTo, keepMs: this.keepMs } satisfies DirectRequest);
    await this.redis.zadd(keys.directRequests(this.prefix, model), request.enqueuedAt, member);
    return { model, request, member, unaccounted: 0 };
  }

  /** Takes a request back if no worker has popped it yet; true if it was still queued. */
  async retract(ticket: DirectTicket): Promise<boolean> {
    return (await this.redis.zrem(keys.directRequests(this.prefix, ticket.model), ticket.member)) === 1;
  }

  /**
   * What became of a request not answered within a poll period. One still queued is taken back:
   * no worker was free for a whole period, so it waits as a job instead, where the dashboard and
   * KEDA see it. One popped by a worker that has not said so yet is given one more period.
   */
  async fate(ticket: DirectTicket): Promise<DirectFate> {
    if (await this.retract(ticket)) return { orphaned: true };
    const raw = await this.redis.get(keys.directState(this.prefix, ticket.request.id));
    const state = raw === null ? undefined : (JSON.parse(raw) as DirectState);
    if (state && 'outcomes' in state) return { outcome: state };
    if (state) return this.isLive(state.takenBy) ? { held: true } : { orphaned: true };
    // Nowhere: popped by a worker that died before saying so, or lost with a Redis that restarted empty.
    return ++ticket.unaccounted > 1 ? { orphaned: true } : { unknown: true };
  }
}
