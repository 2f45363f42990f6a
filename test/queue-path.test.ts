/**
 * Issue 9, the queue path: a gateway coalesces the requests that arrive while a model's last job is
 * on its way to Redis or waiting there for a worker into one job, each request keeps its own answer,
 * and a request whose client left is never run: withdrawn before it reached Redis, or skipped by the
 * worker once queued.
 *
 * To hold an enqueue in flight for as long as the test needs, its private Redis is frozen with
 * SIGSTOP; to hold a job in the queue, the worker is.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Queue, QueueEvents } from 'bullmq';
import { Redis } from 'ioredis';
import { EVENTS_KEPT, announceWorker, keys, queueNameFor, withdrawWorker } from '@tserve/queue';
import { PROTOCOL, type JobData, type ReadyBody, type WorkerInfo } from '@tserve/contract';
import pino from 'pino';
import { Heartbeat } from '../apps/worker/src/transport/heartbeat.ts';
import { PrivateRedis, TestSystem, freePort, uniquePrefix, waitFor, type Proc } from './helpers/system.ts';
import { CLASSIFIER as MODEL } from './helpers/replicas.ts';
import { QueueClient } from './helpers/queue-client.ts';

describe('queue path', () => {
  let redis: PrivateRedis;
  let system: TestSystem;
  let worker: Proc;
  let admin: Redis;
  let queue: Queue;

  before(async () => {
    redis = new PrivateRedis(await freePort());
    await redis.start();
    // Long-lived heartbeats and Redis timeouts: freezing Redis must not look like a dead worker or an outage.
    system = new TestSystem(uniquePrefix('queue-path'), redis.url, { WORKER_TTL_MS: 120_000 });
    // RESULT_POLL_MS is also the grace after which a gateway stops waiting to hear that a worker took its job.
    // The circuit breaker's timeout follows REDIS_COMMAND_TIMEOUT_MS.
    await system.startGateway({ REDIS_COMMAND_TIMEOUT_MS: 30_000, RESULT_POLL_MS: 120_000 });
    worker = system.startWorker({ model: MODEL, env: { DTYPE: 'fp32' } });
    await system.waitForWorkers(MODEL);
    admin = new Redis(redis.url);
    // An observer: it must not write its own settings over the gateway's.
    queue = new Queue(queueNameFor(MODEL), { connection: admin, prefix: system.prefix, skipMetasUpdate: true });
  });
  after(async () => {
    redis.proc?.kill('SIGCONT');
    worker.kill('SIGCONT');
    await queue.close();
    admin.disconnect();
    await system.stop();
    await redis.stop();
  });

  it('a lone request costs its queue three scripts: its add, one fetch and its completion', async () => {
    // BullMQ's scripts run as EVALSHA (the gateways' depth exchange, every REGISTRY_REFRESH_MS, as
    // EVAL). Between requests BullMQ's stalled-job check and lock renewals add a few over the whole
    // run, a small fraction per request; a wasted fetch after each job would add one or two.
    const requests = 60;
    // A worker publishes an outcome before it completes the job, so the count runs from and to
    // completed jobs, as BullMQ's event stream tells them (read without a script).
    const events = new QueueEvents(queueNameFor(MODEL), {
      connection: { host: '127.0.0.1', port: redis.port },
      prefix: system.prefix,
    });
    let completions = 0;
    events.on('completed', () => completions++);
    await events.waitUntilReady();
    const completed = (jobs: number) => waitFor(`${jobs} jobs completed`, async () => completions >= jobs, 10_000, 5);
    let stats: string;
    try {
      await system.infer(MODEL, 'warming up');
      await completed(1);
      await admin.config('RESETSTAT');
      for (let i = 0; i < requests; i++) assert.equal((await system.infer(MODEL, `lone request ${i}`)).status, 200);
      await completed(1 + requests);
      stats = await admin.info('commandstats');
    } finally {
      await events.close();
    }
    const calls = (command: string) => Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
    const perRequest = calls('evalsha') / requests;
    assert.ok(perRequest >= 3 && perRequest < 3.3, `${perRequest} scripts per request:\n${stats}`);
    assert.equal(calls('bzpopmin'), 0, 'an idle worker waits for a notice, not on the queue');
  });

  it('runs jobs whose work notice was lost: the idle worker finds them at its poll, with what waits behind them', async () => {
    // The requests above left the worker idle, waiting for a notice; none comes for these.
    const client = new QueueClient(redis.url, system.prefix, MODEL);
    await client.start();
    try {
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push(...(await client.addJob([{ inputs: [`unannounced ${i}`] }], false)));
      const outcomes = await Promise.all(ids.map((id) => client.outcome(id)));
      assert.ok(
        outcomes.every((o) => o.ok),
        JSON.stringify(outcomes.find((o) => !o.ok)),
      );
    } finally {
      await client.close();
    }
  });

  it('coalesces requests that arrive during an enqueue into one job; each gets its own answer', async () => {
    const texts = Array.from({ length: 10 }, (_, i) => `request number ${i} was ${i % 2 ? 'great' : 'awful'}`);
    const alone = new Map<string, number>();
    for (const text of texts)
      alone.set(
        text,
        (await system.infer(MODEL, text, { top_k: null })).body[0].find((x: any) => x.label === 'POSITIVE').score,
      );
    const jobsBefore = await queue.getCompletedCount();

    redis.proc!.kill('SIGSTOP');
    let answers;
    try {
      const first = system.infer(MODEL, texts[0], { top_k: null });
      // The first request's enqueue hangs in the frozen Redis; the rest arrive while it is in flight.
      await waitFor(
        'the first request accepted',
        async () => (await system.metric('tserve_queue_depth', { model: MODEL })) === 1,
        10_000,
        20,
      );
      const rest = texts.slice(1).map((text) => system.infer(MODEL, text, { top_k: null }));
      await waitFor(
        'all ten accepted',
        async () => (await system.metric('tserve_queue_depth', { model: MODEL })) === 10,
        10_000,
        20,
      );
      redis.proc!.kill('SIGCONT');
      answers = await Promise.all([first, ...rest]);
    } finally {
      redis.proc!.kill('SIGCONT');
    }
    answers.forEach((r, i) => {
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const score = r.body[0].find((x: any) => x.label === 'POSITIVE').score;
      assert.ok(
        Math.abs(score - alone.get(texts[i])!) < 1e-5,
        `request ${i} got its own answer: ${score} vs ${alone.get(texts[i])}`,
      );
    });
    assert.equal(new Set(answers.map((r) => r.headers.get('x-request-id'))).size, 10, 'each request kept its own id');
    // The lone first request went out at once, as a job of its own; the nine that waited for it, as one.
    await waitFor('two jobs recorded', async () => (await queue.getCompletedCount()) - jobsBefore === 2, 10_000);
  });

  it('holds requests back while a job that asked to hear it was taken waits for a worker, and sends them as one job once a worker takes it', async () => {
    const texts = Array.from({ length: 6 }, (_, i) => `queued behind a busy worker, number ${i}`);
    const jobsBefore = await queue.getCompletedCount();
    worker.kill('SIGSTOP');
    let answers;
    try {
      const first = system.infer(MODEL, texts[0]);
      await waitFor('the first job queued', async () => (await queue.getWaitingCount()) === 1, 10_000, 20);
      // Nothing else was outstanding when the first went out, so it asked no worker to say it took it,
      // and nothing is held behind it: the second goes at once, finds the first outstanding, and asks.
      const second = system.infer(MODEL, texts[1]);
      await waitFor('the second job queued', async () => (await queue.getWaitingCount()) === 2, 10_000, 20);
      const rest = texts.slice(2).map((text) => system.infer(MODEL, text));
      await waitFor(
        'all six accepted',
        async () => (await system.metric('tserve_queue_depth', { model: MODEL })) === 6,
        10_000,
        20,
      );
      const queued = new Map(
        (await queue.getWaiting()).map((job) => {
          const data = job.data as JobData;
          return [JSON.stringify(data.requests.map((r) => r.inputs)), data.tellTaken];
        }),
      );
      assert.deepEqual(
        queued,
        new Map([
          [JSON.stringify([[texts[0]]]), false],
          [JSON.stringify([[texts[1]]]), true],
        ]),
        'the four wait in the gateway, not as jobs of their own',
      );
      worker.kill('SIGCONT');
      answers = await Promise.all([first, second, ...rest]);
    } finally {
      worker.kill('SIGCONT');
    }
    for (const r of answers) assert.equal(r.status, 200, JSON.stringify(r.body));
    await waitFor('three jobs recorded', async () => (await queue.getCompletedCount()) - jobsBefore === 3, 10_000);
  });

  const info = (id: string, model: string, state: WorkerInfo['state'] = 'ready'): WorkerInfo => ({
    kind: 'worker',
    protocol: PROTOCOL,
    id,
    model,
    state,
    task: 'text-classification',
    dtype: 'fp32',
    device: 'cpu',
    pid: 0,
    host: 'test',
    startedAt: 0,
    batchMaxSize: 1,
    batchMaxTokens: 8,
    maxTokens: 8,
  });

  it('sends no work to a worker of another wire protocol, and says why in the answer, /ready and the log', async () => {
    const model = 'org/of-another-release';
    const foreign: WorkerInfo = { ...info('foreign', model), protocol: PROTOCOL + 1 };
    await announceWorker(admin, system.prefix, foreign, 60_000);
    try {
      const ready = await waitFor('the gateway to see the worker', async () => {
        const body = (await (await fetch(`${system.url}/ready`)).json()) as ReadyBody;
        return body.models[model] ? body : undefined;
      });
      const why = `model ${model} is served only by workers of wire protocol ${PROTOCOL + 1}; this gateway speaks protocol ${PROTOCOL}`;
      assert.deepEqual(
        { ...ready.models[model], error: ready.models[model].error?.slice(0, why.length) },
        { workers: 0, error: why },
      );
      assert.ok(
        ready.reasons.some((r) => r.startsWith(why)),
        JSON.stringify(ready.reasons),
      );
      const res = await system.infer(model, 'sent to nobody');
      assert.equal(res.status, 503, JSON.stringify(res.body));
      assert.ok(res.body.error.startsWith(why), res.body.error);
      // Not in this release's queue for the model, nor in the other release's, whatever name it has.
      const ours = new Queue(queueNameFor(model), { connection: admin, prefix: system.prefix, skipMetasUpdate: true });
      try {
        assert.equal(await ours.count(), 0);
      } finally {
        await ours.close();
      }
      // BullMQ's keys of a queue start with its name, whatever the protocol in it.
      assert.deepEqual(
        await admin.keys(`${system.prefix}:models--org--of-another-release*`),
        [],
        'no queue of the model was written',
      );
      assert.match(system.gateway!.output, /served only by workers of wire protocol/);
    } finally {
      await withdrawWorker(admin, system.prefix, foreign);
    }
  });

  it('a worker counts the other ready workers of its model (with some, a busy worker tells gateways at fetch)', async () => {
    const prefix = uniquePrefix('peers');
    const heartbeat = new Heartbeat({
      redis: admin,
      prefix,
      info: info('me', 'a'),
      everyMs: 60_000,
      ttlMs: 60_000,
      logger: pino({ level: 'silent' }),
    });
    try {
      await heartbeat.beat();
      assert.equal(heartbeat.peers, 0, 'alone');
      for (const other of [info('loading', 'a', 'loading'), info('elsewhere', 'b')])
        await announceWorker(admin, prefix, other, 60_000);
      await heartbeat.beat();
      assert.equal(heartbeat.peers, 0, 'a worker still loading, or of another model, is no peer');
      await announceWorker(admin, prefix, info('peer', 'a'), 60_000);
      await heartbeat.beat();
      assert.equal(heartbeat.peers, 1);
      // A worker that stopped beating drops out once its announcement lapses (on Redis's clock).
      await announceWorker(admin, prefix, info('lapsing', 'a'), 60_000);
      await heartbeat.beat();
      assert.equal(heartbeat.peers, 2);
      await announceWorker(admin, prefix, info('lapsing', 'a'), 1);
      // Its short-lived announcement must not take the others' places with it.
      await waitFor(
        'the announcement lapsed',
        async () => (await admin.exists(keys.worker(prefix, 'lapsing'))) === 0,
        10_000,
        5,
      );
      await waitFor('the lapsed worker no longer counted', async () => {
        await heartbeat.beat();
        return heartbeat.peers === 1;
      });
      await withdrawWorker(admin, prefix, info('peer', 'a'));
      await heartbeat.beat();
      assert.equal(heartbeat.peers, 0, 'a withdrawn worker is no peer');
    } finally {
      await heartbeat.stop();
      const ids = ['me', 'loading', 'elsewhere', 'peer', 'lapsing'];
      await admin.del(
        keys.workers(prefix),
        keys.readyWorkers(prefix, 'a'),
        keys.readyWorkers(prefix, 'b'),
        ...ids.map((id) => keys.worker(prefix, id)),
      );
    }
  });

  it("keeps BullMQ's event stream short: nothing reads it, and each completed event holds a job's outcomes", async () => {
    for (let i = 0; i < 70; i++) assert.equal((await system.infer(MODEL, `one job each, number ${i}`)).status, 200);
    assert.equal(
      await admin.hget(queue.keys.meta, 'opts.maxLenEvents'),
      String(EVENTS_KEPT),
      'the cap the gateway set',
    );
    // Seventy jobs leave about 350 events. Redis trims whole nodes of at most 100 entries (its
    // stream-node-max-entries), so up to that many more than the cap remain.
    const events = await admin.xlen(queue.keys.events);
    assert.ok(events > 0 && events <= EVENTS_KEPT + 100, `${events} events kept`);
  });

  it('withdraws a request whose client leaves before its enqueue; it never reaches Redis', async () => {
    const before = await system.metric('tserve_requests_abandoned_total', { model: MODEL, at: 'gateway' });
    const jobsBefore = await queue.getCompletedCount();
    redis.proc!.kill('SIGSTOP');
    try {
      const held = system.infer(MODEL, 'holds the enqueue in flight');
      await waitFor(
        'the first request accepted',
        async () => (await system.metric('tserve_queue_depth', { model: MODEL })) === 1,
        10_000,
        20,
      );
      const leaving = system.leavingRequest(MODEL, 'the client of this one leaves');
      await waitFor(
        'the second request accepted',
        async () => (await system.metric('tserve_queue_depth', { model: MODEL })) === 2,
        10_000,
        20,
      );
      leaving.leave();
      assert.equal(await leaving.left, 'aborted');
      await waitFor(
        'the gateway withdrew it',
        async () =>
          (await system.metric('tserve_requests_abandoned_total', { model: MODEL, at: 'gateway' })) === before + 1,
        10_000,
        20,
      );
      redis.proc!.kill('SIGCONT');
      assert.equal((await held).status, 200);
    } finally {
      redis.proc!.kill('SIGCONT');
    }
    // Only the first request's job ever existed.
    await waitFor('one job recorded', async () => (await queue.getCompletedCount()) - jobsBefore === 1, 10_000);
    assert.equal(await queue.getWaitingCount(), 0);
  });

  it('skips a queued request whose client left, and counts it', async () => {
    const skippedBefore = await system.metric('tserve_requests_skipped_total', { model: MODEL });
    worker.kill('SIGSTOP');
    let requestId: string | null = null;
    try {
      const leaving = system.leavingRequest(MODEL, 'nobody will read this answer');
      await waitFor('the job queued', async () => (await queue.getWaitingCount()) === 1, 10_000, 20);
      requestId = (await queue.getWaiting())[0].id!;
      leaving.leave();
      assert.equal(await leaving.left, 'aborted');
      await waitFor(
        'the gateway told the workers',
        async () => (await system.metric('tserve_requests_abandoned_total', { model: MODEL, at: 'queue' })) >= 1,
        10_000,
        20,
      );
    } finally {
      worker.kill('SIGCONT');
    }
    const stored = await waitFor('the job settled', () => system.jobReturnValue(MODEL, requestId), 10_000);
    const outcome = stored.outcomes.find((o: { id: string }) => o.id === requestId);
    assert.ok(outcome && !outcome.ok && outcome.error.error_type === 'cancelled', JSON.stringify(stored));
    await waitFor(
      'the skip counted',
      async () => (await system.metric('tserve_requests_skipped_total', { model: MODEL })) === skippedBefore + 1,
      10_000,
      20,
    );
    // The worker goes on serving.
    assert.equal((await system.infer(MODEL, 'still here')).status, 200);
  });
});
