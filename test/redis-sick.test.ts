/**
 * Issue 56, Redis sick rather than down: frozen (SIGSTOP), full (maxmemory), restarted empty under
 * queued requests; and retention, read in Redis: finished jobs expire by time when traffic stops.
 * Each case fails fast, says what is wrong with Redis, and keeps users' texts no longer than promised.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import type { ReadyBody } from '@tserve/contract';
import { outcomesKeptMs, queueNameFor } from '@tserve/queue';
import { PrivateRedis, REDIS_URL, TestSystem, uniquePrefix, waitFor } from './helpers/system.ts';
import { CLASSIFIER as MODEL } from './helpers/replicas.ts';
import * as grpc from '@grpc/grpc-js';
import { grpcClient, texts, unary } from './helpers/grpc.ts';

/** A private Redis with a gateway and one worker on it, warmed by `warm` answered requests. */
async function systemOnPrivateRedis(
  t: { after: (fn: () => Promise<void>) => void },
  name: string,
  gatewayEnv: Record<string, number>,
  warm = 1,
  workerEnv: Record<string, number> = {},
) {
  const redis = await PrivateRedis.onFreePort();
  await redis.start();
  const system = new TestSystem(uniquePrefix(name), redis.url);
  t.after(async () => {
    await system.stop();
    await redis.stop();
  });
  const gateway = await system.startGateway({ LOG_LEVEL: 'info', ...gatewayEnv });
  const worker = system.startWorker({ model: MODEL, env: workerEnv });
  await system.waitForWorkers(MODEL);
  for (let i = 0; i < warm; i++) assert.equal((await system.infer(MODEL, `warm ${i}`)).status, 200);
  return { redis, system, gateway, worker };
}

const readyOf = async (system: TestSystem) => {
  const res = await fetch(`${system.url}/ready`);
  return { status: res.status, body: (await res.json()) as ReadyBody };
};

describe('Redis sick', () => {
  it('frozen: the breaker opens on the first timed-out enqueue, and what follows is refused at once, naming the cause', async (t) => {
    // Fifty answers first: their successes fill the breaker's window, which a rate alone would
    // need many timed-out calls (each a whole timeout long) to outweigh.
    const { redis, system, gateway } = await systemOnPrivateRedis(
      t,
      'frozen',
      { REDIS_COMMAND_TIMEOUT_MS: 500, REQUEST_TIMEOUT_MS: 20_000 },
      50,
    );
    redis.proc!.kill('SIGSTOP');
    // Thawed whatever happens: the cleanup after the test needs Redis.
    try {
      const answers: Array<{ status: number; error: string }> = [];
      for (let i = 0; i < 10; i++) {
        const r = await system.infer(MODEL, `while Redis is frozen ${i}`);
        answers.push({ status: r.status, error: String(r.body.error) });
      }
      for (const a of answers) assert.equal(a.status, 503, `a 503, not the deadline's 504: ${JSON.stringify(a)}`);
      const byBreaker = answers.filter((a) => /circuit breaker open/.test(a.error));
      assert.ok(
        byBreaker.length >= 8,
        `all but the first one or two refused by the open breaker: ${JSON.stringify(answers)}`,
      );
      for (const a of answers) assert.match(a.error, /Redis is not answering/);
      await waitFor('the breaker line in the log', async () =>
        /circuit breaker opened: refusing requests; Redis is not answering/.test(gateway.output),
      );
      // Over gRPC too (issue 58): refused by the open breaker, UNAVAILABLE, naming it and its cause.
      const inference = grpcClient('inference.GRPCInferenceService', system.grpcPort);
      try {
        const refused = await unary(inference, 'ModelInfer', { model_name: MODEL, inputs: [texts('frozen')] }).then(
          () => assert.fail('answered while Redis is frozen'),
          (err: grpc.ServiceError) => err,
        );
        assert.equal(refused.code, grpc.status.UNAVAILABLE, refused.details);
        assert.match(refused.details, /circuit breaker open.*Redis is not answering/);
      } finally {
        inference.close();
      }
      const ready = await readyOf(system);
      assert.equal(ready.status, 503);
      assert.ok(
        ready.body.reasons.some((r) => /circuit breaker to Redis is open: Redis is not answering/.test(r)),
        JSON.stringify(ready.body.reasons),
      );
    } finally {
      redis.proc!.kill('SIGCONT');
    }
    await waitFor(
      'served again once Redis thaws',
      async () => (await system.infer(MODEL, 'thawed')).status === 200,
      30_000,
      250,
    );
  });

  it('out of memory: the answer, /ready and the log say so, not "no live worker"', async (t) => {
    const { redis, system, gateway } = await systemOnPrivateRedis(t, 'oom', {
      REDIS_COMMAND_TIMEOUT_MS: 500,
      REQUEST_TIMEOUT_MS: 20_000,
    });
    const admin = new Redis(redis.url);
    t.after(() => void admin.quit());
    // Every write refused from now on, as when the queues outgrow maxmemory under noeviction.
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    await admin.config('SET', 'maxmemory', '1');
    const r = await system.infer(MODEL, 'into a full Redis');
    assert.equal(r.status, 503, JSON.stringify(r.body));
    assert.match(r.body.error, /Redis is out of memory/);
    const ready = await readyOf(system);
    assert.equal(ready.status, 503);
    assert.match(ready.body.reasons[0], /Redis is out of memory/, JSON.stringify(ready.body.reasons));
    await waitFor('the cause in the log', async () =>
      /circuit breaker opened: refusing requests; Redis is out of memory/.test(gateway.output),
    );
    await admin.config('SET', 'maxmemory', '0');
    await waitFor(
      'served again with room in Redis',
      async () => (await system.infer(MODEL, 'room again')).status === 200,
      30_000,
      250,
    );
  });

  it('restarted empty: requests whose jobs it held fail at the next fallback read, naming the lost job, not at the deadline', async (t) => {
    // The frozen worker stays live to the gateway meanwhile, so that the model stays served and its depth reported.
    const live = { WORKER_TTL_MS: 60_000 };
    const { redis, system, worker } = await systemOnPrivateRedis(
      t,
      'lost',
      { REQUEST_TIMEOUT_MS: 60_000, RESULT_POLL_MS: 200, ...live },
      1,
      live,
    );
    // A frozen worker takes nothing more: the requests below stay queued in Redis.
    worker.kill('SIGSTOP');
    t.after(() => worker.kill('SIGKILL'));
    const pending = Array.from({ length: 5 }, (_, i) => system.infer(MODEL, `held by Redis ${i}`));
    // All five accepted, and none still held in the gateway: every one of them is in a job in Redis.
    await waitFor(
      'the 5 requests sent to Redis',
      async () =>
        (await system.metric('tserve_queue_depth', { model: MODEL })) >= 5 &&
        (await system.metric('tserve_requests_held', { model: MODEL })) === 0,
    );
    await redis.stop();
    await redis.start();
    const answers = await Promise.all(pending);
    for (const a of answers) {
      assert.equal(a.status, 503, `lost, not 504 at the 60 s deadline: ${JSON.stringify(a.body)}`);
      assert.match(a.body.error, /lost with its job/);
    }
  });
});

describe('retention', () => {
  it('removes finished jobs and their events by time once traffic stops, whichever gateway runs then', async (t) => {
    const system = new TestSystem(uniquePrefix('retention'));
    t.after(() => system.stop());
    await system.startGateway({ RESULT_POLL_MS: 200 });
    system.startWorker({ model: MODEL });
    await system.waitForWorkers(MODEL);
    for (let i = 0; i < 3; i++) assert.equal((await system.infer(MODEL, `a user's text ${i}`)).status, 200);

    const redis = new Redis(REDIS_URL);
    const queue = new Queue(queueNameFor(MODEL), { connection: redis, prefix: system.prefix });
    t.after(async () => {
      await queue.close();
      redis.disconnect();
    });
    const completed = await queue.getJobs(['completed']);
    assert.ok(completed.length > 0, 'the finished jobs are kept a while, for the fallback read');
    const eventsKey = `${system.prefix}:${queueNameFor(MODEL)}:events`;
    assert.ok((await redis.xlen(eventsKey)) > 0);
    // No more traffic: nothing finishes that would make BullMQ remove the old ones. And a gateway
    // started since, which never used the queue, is the one to remove them.
    await system.gateway!.stop();
    await system.startGateway({ RESULT_POLL_MS: 200 });
    const keptMs = outcomesKeptMs(200);
    await waitFor(
      'the finished jobs removed',
      async () => (await queue.getJobCounts('completed')).completed === 0 && (await redis.xlen(eventsKey)) === 0,
      3 * keptMs,
      250,
    );
    for (const job of completed)
      assert.equal(
        await redis.exists(`${system.prefix}:${queueNameFor(MODEL)}:${job.id}`),
        0,
        `job ${job.id}'s hash is gone`,
      );
    // Not before they were kept as long as promised: the newest finished at least keptMs ago.
    const newest = Math.max(...completed.map((j) => j.finishedOn ?? 0));
    assert.ok(Date.now() - newest >= keptMs, 'kept at least as long as docs/protocol.md says');
  });
});
