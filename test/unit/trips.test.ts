import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import pino from 'pino';
import { encodeResultMessage, type ReadJobOutcome, type ResultMessage } from '@tserve/contract';
import type { QueuedRequest } from '@tserve/contract';
import { SendFailed, Trips, type FinishedJobs } from '../../apps/gateway/src/transport/trips.ts';
import { Withdrawn } from '../../apps/gateway/src/transport/sending.ts';
import { RedisLink } from '../../apps/gateway/src/transport/link.ts';

const CHANNEL = 'results:gw-1';

/** The subscriber as Trips uses it: it subscribes once, then hears messages. */
class Subscriber extends EventEmitter {
  async subscribe(): Promise<void> {}
  async unsubscribe(): Promise<void> {}
  /** A message as a worker publishes it. */
  say(message: ResultMessage): void {
    this.emit('messageBuffer', Buffer.from(CHANNEL), encodeResultMessage(message));
  }
  /** JSON that no worker writes. */
  sayOther(message: unknown): void {
    this.emit('messageBuffer', Buffer.from(CHANNEL), Buffer.from(JSON.stringify(message)));
  }
}

/** Connections as RedisLink watches them: lost and back when the test says. */
class Connection extends EventEmitter {
  status = 'ready';
  lose(): void {
    this.status = 'reconnecting';
    this.emit('close');
  }
  back(): void {
    this.status = 'ready';
    this.emit('ready');
  }
}

/** The gateway's two connections to Redis, and their link, which waits `waitMs` for Redis to come back. */
function redisLink(waitMs = 1000) {
  const connections = [new Connection(), new Connection()];
  const link = new RedisLink(connections as unknown as Redis[], waitMs);
  return { link, connections };
}

async function harness(
  t: { after: (fn: () => Promise<void>) => void },
  readFinished: FinishedJobs['finished'] = () => Promise.reject(new Error('not here')),
  { link = redisLink().link, pollMs = 60_000 }: { link?: RedisLink; pollMs?: number } = {},
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
    pollMs,
    jobs: { finished: readFinished },
    link,
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

  it('refuses the requests sent to a Redis lost past REDIS_FAILOVER_WAIT_MS with 503, and only those', async (t) => {
    const { link, connections } = redisLink();
    const { waiters, warned } = await harness(t, undefined, { link, pollMs: 20 });
    const deadline = Date.now() + 60_000;
    const sent = waiters.wait('r1', deadline);
    waiters.bind('r1', { model: 'm', id: 'j1' });
    // Not yet sent to Redis: its enqueue fails on its own, and it is no job's to refuse here.
    const held = waiters.wait('r2', deadline);
    const lostAt = Date.now();
    connections[1].lose();
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(waiters.pending, 2, 'lost for less than the bound: still waiting');
    const refused = await sent.then(
      () => assert.fail('answered'),
      (err: { status: number; message: string }) => err,
    );
    assert.ok(Date.now() - lostAt >= 1000, 'not before the bound');
    assert.equal(refused.status, 503);
    assert.match(refused.message, /Redis was lost 1\.\d s ago .*failing over/);
    assert.equal(waiters.pending, 1);
    assert.ok(warned.some((w) => /requests refused: Redis was lost/.test(w)));
    waiters.cancel('r2');
    void held.catch(() => {});
  });

  it('reads every waiting job at once when Redis is back, and fails those the new primary never saw', async (t) => {
    const { link, connections } = redisLink();
    const read: string[] = [];
    const { waiters } = await harness(
      t,
      async (_model, jobId) => {
        read.push(jobId);
        return jobId === 'j1' ? 'lost' : { kind: 'outcome', job: jobId, model: 'm', outcomes: [answer('r2')] };
      },
      { link },
    );
    const deadline = Date.now() + 60_000;
    const lost = waiters.wait('r1', deadline);
    const kept = waiters.wait('r2', deadline);
    waiters.bind('r1', { model: 'm', id: 'j1' });
    waiters.bind('r2', { model: 'm', id: 'j2' });
    connections[0].lose();
    connections[1].lose();
    connections[0].back();
    assert.deepEqual(read, [], 'not back while one connection is still lost');
    connections[1].back();
    await assert.rejects(lost, /lost with its job.*failed over to a replica that never had it/);
    const answered = await kept;
    assert.deepEqual(answered.ok && answered.outputs, ['r2']);
    assert.deepEqual(read.sort(), ['j1', 'j2'], 'read at once, not a poll period (60 s here) later');
  });

  it('counts a recorded job as taken when none of its requests waits any more', async (t) => {
    const { subscriber, taken } = await harness(t);
    subscriber.say({ kind: 'recorded', job: 'r1', model: 'm', requests: ['r1'] });
    assert.deepEqual(taken, [['r1']]);
  });

  it('skips a message of no known kind, or of a known kind in the wrong shape, and says so', async (t) => {
    const { subscriber, waiters, taken, warned } = await harness(t);
    const pending = waiters.wait('r1', Date.now() + 60_000);
    subscriber.sayOther({ taken: ['r1'] });
    subscriber.sayOther({ kind: 'outcome', job: 'r1', model: 'm', outcomes: [{ id: 'r1', ok: true }] });
    subscriber.emit('messageBuffer', Buffer.from(CHANNEL), Buffer.from('not json'));
    assert.deepEqual(taken, []);
    assert.deepEqual(warned, ['unreadable result message', 'unreadable result message', 'unreadable result message']);
    assert.equal(waiters.pending, 1);
    waiters.cancel('r1');
    void pending.catch(() => {});
  });
});

/** A coalescer that holds each request until told to send it or take it back, as EnqueueCoalescer does. */
class HeldRequests {
  private readonly held = new Map<string, { resolve: (job: string) => void; reject: (err: unknown) => void }>();

  submit = (_model: string, request: QueuedRequest) =>
    new Promise<string>((resolve, reject) => this.held.set(request.id, { resolve, reject }));
  withdraw = (_model: string, requestId: string) => {
    const entry = this.held.get(requestId);
    this.held.delete(requestId);
    entry?.reject(new Withdrawn());
    return entry !== undefined;
  };
  /** A worker's word that it took jobs: the requests held behind them could go (not modelled here). */
  taken = () => {};
  /** The request's job is in Redis, or its enqueue failed. */
  sent(requestId: string, outcome: { job: string } | { error: Error }): void {
    const entry = this.held.get(requestId);
    this.held.delete(requestId);
    if ('job' in outcome) entry?.resolve(outcome.job);
    else entry?.reject(outcome.error);
  }
}

async function tripHarness(t: { after: (fn: () => Promise<void>) => void }) {
  const subscriber = new Subscriber();
  const coalescer = new HeldRequests();
  const cancelled: string[] = [];
  const trips = new Trips({
    coalescer: { submit: coalescer.submit, withdraw: coalescer.withdraw, taken: coalescer.taken },
    sender: { cancel: (model, request) => void cancelled.push(`${model} ${request.id}`) },
    subscriber: subscriber as unknown as Redis,
    channel: CHANNEL,
    pollMs: 60_000,
    jobs: { finished: () => Promise.reject(new Error('not here')) },
    link: redisLink().link,
    logger: pino({ level: 'silent' }),
  });
  await trips.start();
  t.after(() => trips.stop());
  return { subscriber, coalescer, cancelled, trips };
}

const request = (id: string): QueuedRequest => ({
  id,
  inputs: ['text'],
  parameters: {},
  deadline: Date.now() + 60_000,
  enqueuedAt: Date.now(),
});

describe('a trip', () => {
  it('resolves with the outcome its job brings', async (t) => {
    const { subscriber, coalescer, trips } = await tripHarness(t);
    const trip = trips.send({ model: 'm', request: request('r1'), priority: 'interactive', jobSequences: 32 });
    coalescer.sent('r1', { job: 'r1' });
    await new Promise((resolve) => setImmediate(resolve));
    subscriber.say({ kind: 'outcome', job: 'r1', model: 'm', outcomes: [answer('r1')] });
    const outcome = await trip;
    assert.ok(outcome.ok);
    assert.deepEqual(outcome.outputs, ['r1']);
    assert.equal(trips.pending, 0);
  });

  it('takes back a request whose client leaves before it is sent, and counts it at the gateway', async (t) => {
    const { coalescer, cancelled, trips } = await tripHarness(t);
    const client = new AbortController();
    const trip = trips.send({
      model: 'm',
      request: request('r1'),
      priority: 'interactive',
      signal: client.signal,
      jobSequences: 32,
    });
    client.abort();
    await assert.rejects(trip, { status: 499 });
    assert.deepEqual(trips.abandoned.get('m'), { gateway: 1, queue: 0 });
    assert.deepEqual(cancelled, [], 'nothing reached the workers, so they are told nothing');
    assert.equal(trips.pending, 0);
    assert.equal(coalescer.withdraw('m', 'r1'), false, 'no longer held');
  });

  it('names a queued request to the workers when its client leaves, and counts it in the queue', async (t) => {
    const { coalescer, cancelled, trips } = await tripHarness(t);
    const client = new AbortController();
    const trip = trips.send({
      model: 'm',
      request: request('r1'),
      priority: 'interactive',
      signal: client.signal,
      jobSequences: 32,
    });
    coalescer.sent('r1', { job: 'r1' });
    await new Promise((resolve) => setImmediate(resolve));
    client.abort();
    await assert.rejects(trip, { status: 499 });
    assert.deepEqual(trips.abandoned.get('m'), { gateway: 0, queue: 1 });
    assert.deepEqual(cancelled, ['m r1']);
    assert.equal(trips.pending, 0);
  });

  it('fails with SendFailed, and stops waiting, when its job cannot be added', async (t) => {
    const { coalescer, trips } = await tripHarness(t);
    const trip = trips.send({ model: 'm', request: request('r1'), priority: 'interactive', jobSequences: 32 });
    coalescer.sent('r1', { error: new Error('Redis is down') });
    await assert.rejects(trip, (err: unknown) => err instanceof SendFailed && /Redis is down/.test(err.message));
    assert.equal(trips.pending, 0);
  });
});
