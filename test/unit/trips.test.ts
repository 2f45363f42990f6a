import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import pino from 'pino';
import type { ReadJobOutcome, ResultMessage } from '@tserve/contract';
import { Trips, type FinishedJobs } from '../../apps/gateway/src/transport/trips.ts';

const CHANNEL = 'results:gw-1';

/** The subscriber as Trips uses it: it subscribes once, then hears messages. */
class Subscriber extends EventEmitter {
  async subscribe(): Promise<void> {}
  async unsubscribe(): Promise<void> {}
  say(message: ResultMessage | Record<string, unknown>): void {
    this.emit('message', CHANNEL, JSON.stringify(message));
  }
}

async function harness(
  t: { after: (fn: () => Promise<void>) => void },
  readFinished: FinishedJobs['finished'] = () => Promise.reject(new Error('not here')),
) {
  const subscriber = new Subscriber();
  const taken: string[][] = [];
  const warned: string[] = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => warned.push(JSON.parse(line).msg) });
  const waiters = new Trips({
    coalescer: {
      taken: (ids) => void taken.push(ids),
      submit: () => Promise.reject(new Error('not sent here')),
      withdraw: () => false,
    },
    sender: { cancel: () => {} },
    subscriber: subscriber as unknown as Redis,
    channel: CHANNEL,
    pollMs: 60_000,
    jobs: { finished: readFinished },
    logger,
  });
  await waiters.start();
  t.after(() => waiters.stop());
  return { subscriber, waiters, taken, warned };
}

const answer = (id: string) => ({
  id,
  ok: true as const,
  outputs: [id],
  warnings: [],
  timing: { queue_ms: 1, inference_ms: 1, batch_size: 2 },
});

describe('outcome waiters', () => {
  it('passes a worker’s word that it took jobs on to the coalescer', async (t) => {
    const { subscriber, taken } = await harness(t);
    subscriber.say({ kind: 'taken', jobs: ['j1', 'j2'] });
    assert.deepEqual(taken, [['j1', 'j2']]);
  });

  it('counts a job whose outcomes arrive as taken, though its word never came', async (t) => {
    const { subscriber, waiters, taken } = await harness(t);
    const deadline = Date.now() + 60_000;
    const answers = [waiters.wait('r1', deadline), waiters.wait('r2', deadline)];
    subscriber.say({ kind: 'outcome', job: 'r1', model: 'm', outcomes: [answer('r1'), answer('r2')] });
    assert.deepEqual(taken, [['r1']], 'the job is named by its id, which the coalescer knows it by');
    assert.deepEqual(
      (await Promise.all(answers)).map((o) => o.ok && o.outputs),
      [['r1'], ['r2']],
    );
    assert.equal(waiters.pending, 0);
  });

  it('reads a job’s outcomes where they were recorded when told they were too large to publish, once', async (t) => {
    const outcome: ReadJobOutcome = { kind: 'outcome', job: 'r1', model: 'm', outcomes: [answer('r1'), answer('r2')] };
    const read: string[] = [];
    const { subscriber, waiters, taken } = await harness(t, async (model, jobId) => {
      read.push(`${model} ${jobId}`);
      return outcome;
    });
    const deadline = Date.now() + 60_000;
    const answers = [waiters.wait('r1', deadline), waiters.wait('r2', deadline)];
    waiters.bind('r1', { model: 'm', id: 'r1' });
    waiters.bind('r2', { model: 'm', id: 'r1' });
    subscriber.say({ kind: 'recorded', job: 'r1', model: 'm', requests: ['r1', 'r2'] });
    assert.deepEqual(
      (await Promise.all(answers)).map((o) => o.ok && o.outputs),
      [['r1'], ['r2']],
    );
    assert.deepEqual(read, ['m r1'], 'read once, not once per request');
    assert.deepEqual(taken, [['r1']]);
  });

  it('fails the requests of a job Redis no longer holds, and only those, when it is read', async (t) => {
    const { subscriber, waiters, taken } = await harness(t, async () => 'lost');
    const deadline = Date.now() + 60_000;
    const lost = [waiters.wait('r1', deadline), waiters.wait('r2', deadline)];
    const other = waiters.wait('r3', deadline);
    waiters.bind('r1', { model: 'm', id: 'j1' });
    waiters.bind('r2', { model: 'm', id: 'j1' });
    waiters.bind('r3', { model: 'm', id: 'j2' });
    // A read as the fallback poll makes it: here, for the job a `recorded` message names.
    subscriber.say({ kind: 'recorded', job: 'j1', model: 'm', requests: ['r1', 'r2'] });
    for (const answer of await Promise.allSettled(lost)) {
      assert.equal(answer.status, 'rejected');
      assert.equal((answer.reason as { status: number }).status, 503);
      assert.match((answer.reason as Error).message, /lost with its job/);
    }
    assert.equal(waiters.pending, 1, 'the request of another job still waits');
    assert.deepEqual(taken, [['j1']]);
    waiters.cancel('r3');
    void other.catch(() => {});
  });

  it('counts a recorded job as taken when none of its requests waits any more', async (t) => {
    const { subscriber, taken } = await harness(t);
    subscriber.say({ kind: 'recorded', job: 'r1', model: 'm', requests: ['r1'] });
    assert.deepEqual(taken, [['r1']]);
  });

  it('skips a message of no known kind, or of a known kind in the wrong shape, and says so', async (t) => {
    const { subscriber, waiters, taken, warned } = await harness(t);
    const pending = waiters.wait('r1', Date.now() + 60_000);
    subscriber.say({ taken: ['r1'] });
    subscriber.say({ kind: 'outcome', job: 'r1', model: 'm', outcomes: [{ id: 'r1', ok: true }] });
    subscriber.emit('message', CHANNEL, 'not json');
    assert.deepEqual(taken, []);
    assert.deepEqual(warned, ['unreadable result message', 'unreadable result message', 'unreadable result message']);
    assert.equal(waiters.pending, 1);
    waiters.cancel('r1');
    void pending.catch(() => {});
  });
});
