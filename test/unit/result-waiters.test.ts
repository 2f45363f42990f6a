import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import pino from 'pino';
import type { JobOutcome, JobRecorded, JobsTaken, QueuedRequest } from '@tserve/contract';
import { ResultWaiters } from '../../apps/gateway/src/result-waiters.ts';
import type { DirectFate, DirectRequests, DirectTicket } from '../../apps/gateway/src/direct-requests.ts';

const CHANNEL = 'results:gw-1';

/** The subscriber as ResultWaiters uses it: it subscribes once, then hears messages. */
class Subscriber extends EventEmitter {
  async subscribe(): Promise<void> {}
  async unsubscribe(): Promise<void> {}
  say(message: JobOutcome | JobsTaken | JobRecorded): void {
    this.emit('message', CHANNEL, JSON.stringify(message));
  }
}

async function harness(
  t: { after: (fn: () => Promise<void>) => void },
  fate: (ticket: DirectTicket) => Promise<DirectFate> = () => Promise.reject(new Error('not here')),
) {
  const subscriber = new Subscriber();
  const taken: string[][] = [];
  const waiters = new ResultWaiters(
    subscriber as unknown as Redis,
    CHANNEL,
    60_000,
    pino({ level: 'silent' }),
    () => {},
    (ids) => taken.push(ids),
    { requests: { fate } as DirectRequests, requeue: () => Promise.reject(new Error('not here')), onRequeued: () => {} },
    () => Promise.reject(new Error('not here')),
  );
  await waiters.start();
  t.after(() => waiters.stop());
  return { subscriber, waiters, taken };
}

const answer = (id: string) => ({ id, ok: true as const, outputs: [id], warnings: [], timing: { queue_ms: 1, inference_ms: 1, batch_size: 2 } });

describe('result waiters', () => {
  it('passes a worker’s word that it took jobs on to the coalescer', async (t) => {
    const { subscriber, taken } = await harness(t);
    subscriber.say({ taken: ['j1', 'j2'] });
    assert.deepEqual(taken, [['j1', 'j2']]);
  });

  it('counts a job whose outcomes arrive as taken, though its word never came', async (t) => {
    const { subscriber, waiters, taken } = await harness(t);
    const deadline = Date.now() + 60_000;
    const answers = [waiters.wait('r1', deadline), waiters.wait('r2', deadline)];
    subscriber.say({ job: 'r1', model: 'm', outcomes: [answer('r1'), answer('r2')] });
    assert.deepEqual(taken, [['r1']], 'the job is named by its id, which the coalescer knows it by');
    assert.deepEqual(
      (await Promise.all(answers)).map((o) => o.ok && o.outputs),
      [['r1'], ['r2']],
    );
    assert.equal(waiters.pending, 0);
  });

  it('reads a direct entry’s outcomes where they were recorded when told they were too large to publish', async (t) => {
    const outcome: JobOutcome = { job: 'r1', model: 'm', outcomes: [answer('r1'), answer('r2')] };
    const read: string[] = [];
    const { subscriber, waiters, taken } = await harness(t, async (ticket) => {
      read.push(ticket.id);
      return { outcome };
    });
    const deadline = Date.now() + 60_000;
    const answers = [waiters.wait('r1', deadline), waiters.wait('r2', deadline)];
    const ticket: DirectTicket = { model: 'm', id: 'r1', requests: [{ id: 'r1' }, { id: 'r2' }] as QueuedRequest[], member: '', unaccounted: 0 };
    waiters.bindDirect('r1', ticket);
    waiters.bindDirect('r2', ticket);
    subscriber.say({ recorded: 'r1', model: 'm', requests: ['r1', 'r2'] });
    assert.deepEqual(
      (await Promise.all(answers)).map((o) => o.ok && o.outputs),
      [['r1'], ['r2']],
    );
    assert.deepEqual(read, ['r1'], 'read once, not once per request');
    assert.deepEqual(taken, [['r1']]);
  });

  it('counts a recorded job as taken when none of its requests waits any more', async (t) => {
    const { subscriber, taken } = await harness(t);
    subscriber.say({ recorded: 'r1', model: 'm', requests: ['r1'] });
    assert.deepEqual(taken, [['r1']]);
  });
});
