import type { Redis } from 'ioredis';
import {
  decodeRecordedOutcome,
  type DirectEntry,
  type DirectState,
  type LoneDirectEntry,
  type Priority,
  type QueuedRequest,
  type ReadJobOutcome,
} from '@tserve/contract';
import { keys } from '@tserve/queue';
import type { CoalescedJob } from './coalescer.js';

/** A direct entry this gateway sent and still waits for. */
export interface DirectTicket {
  model: string;
  /** The entry's id (its first request's). */
  id: string;
  requests: QueuedRequest[];
  /** Its entry in the model's set, as sent: removing it needs the exact member. */
  member: string;
  /** Fallback reads that found it neither queued nor held: one is a worker between popping it and saying so. */
  unaccounted: number;
}

/**
 * Whether what a lane sends goes as direct entries, one per job: interactive requests, or only a
 * lone one if the model's workers read only lone entries (`ModelRegistry.directEntries`). Batch-class
 * work always goes as jobs, into BullMQ's prioritized set, so that interactive work overtakes it.
 */
export function goesDirect(priority: Priority, jobs: Array<{ requests: unknown[] }>, entries: 'groups' | 'lone' | undefined): boolean {
  if (priority !== 'interactive' || entries === undefined) return false;
  return entries === 'groups' || (jobs.length === 1 && jobs[0].requests.length === 1);
}

/** What the fallback read found of a direct entry not answered within a poll period. */
export type DirectFate =
  | { outcome: ReadJobOutcome }
  /** A live worker holds it: the answer is coming. */
  | { held: true }
  /** Still unaccounted for once: looked at again at the next read. */
  | { unknown: true }
  /** Nobody holds it: send it as a job. */
  | { orphaned: OrphanReason };

/** Why nobody holds an entry: no worker took it in a whole poll period (busy ones, under load), the one that did is gone, or it is nowhere. */
type OrphanReason = 'not taken' | 'holder gone' | 'lost';

/**
 * Interactive requests sent straight to a model's workers: what a lane sends as one job (a lone
 * request that finds the lane idle, or the requests that coalesced behind the lane's last entry) is
 * put in the model's sorted set of direct entries instead, which idle workers block on together
 * with BullMQ's wake-up marker. An entry costs a few plain commands (this ZADD; the worker's pop, its
 * mark that it took it, the result message and the stored outcomes, and the word that it took it
 * where the entry asked for that) where a job costs BullMQ's three scripts, about 40 commands inside
 * Redis. A lane's next entry waits for a worker's word that it took the last one, where that one
 * asked for it (see the coalescer), so at most two entries per gateway and model wait in the set.
 *
 * What BullMQ gives a job, the fallback read gives an entry: one not answered within a poll period
 * is looked up, and if no live worker holds it (none took it in that time, or the one that did
 * died), the gateway takes it back and sends its requests still waiting as a job, where they are
 * counted, shown on the dashboard and recovered from a dead worker by BullMQ. Sent twice at worst,
 * never lost.
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

  /** Sends each job's requests as an entry, in one command; `lone` writes the one-request form older workers read. */
  async send(model: string, jobs: CoalescedJob[], replyTo: string, lone: boolean): Promise<DirectTicket[]> {
    const tickets = jobs.map(({ id, requests, tellTaken }): DirectTicket => {
      const entry: DirectEntry | LoneDirectEntry = lone
        ? { request: requests[0], replyTo, keepMs: this.keepMs }
        : { id, requests, replyTo, keepMs: this.keepMs, tellTaken };
      return { model, id, requests, member: JSON.stringify(entry), unaccounted: 0 };
    });
    await this.redis.zadd(keys.directRequests(this.prefix, model), ...tickets.flatMap((t) => [t.requests[0].enqueuedAt, t.member]));
    return tickets;
  }

  /** Takes an entry back if no worker has popped it yet; true if it was still queued. */
  async retract(ticket: DirectTicket): Promise<boolean> {
    return (await this.redis.zrem(keys.directRequests(this.prefix, ticket.model), ticket.member)) === 1;
  }

  /**
   * What became of an entry not answered within a poll period. One still queued is taken back:
   * no worker was free for a whole period, so it waits as a job instead, where the dashboard and
   * KEDA see it. One popped by a worker that has not said so yet is given one more period.
   */
  async fate(ticket: DirectTicket): Promise<DirectFate> {
    if (await this.retract(ticket)) return { orphaned: 'not taken' };
    const raw = await this.redis.getBuffer(keys.directState(this.prefix, ticket.id));
    // A taken mark, or outcomes: published ones as JSON, large ones as a record (both read by decodeRecordedOutcome).
    const state = raw === null ? undefined : (decodeRecordedOutcome(raw) as DirectState);
    if (state && 'outcomes' in state) return { outcome: state };
    if (state) return this.isLive(state.takenBy) ? { held: true } : { orphaned: 'holder gone' };
    // Nowhere: popped by a worker that died before saying so, or lost with a Redis that restarted empty.
    return ++ticket.unaccounted > 1 ? { orphaned: 'lost' } : { unknown: true };
  }
}
