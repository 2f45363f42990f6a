/**
 * Issue 4, overload: load shedding answers 503 + Retry-After without enqueueing, and deadlines
 * answer 504 without running the job. A worker frozen with SIGSTOP plays a model that has fallen
 * behind: its heartbeat key is long-lived here, so the gateway still counts it as live.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { exchangeDepths, keys, queueNameFor } from '@tserve/queue';
import { TestSystem, uniquePrefix, REDIS_URL, sleep, waitFor, type Proc } from './helpers/system.ts';
import { CLASSIFIER as MODEL } from './helpers/replicas.ts';

describe('overload', () => {
  const system = new TestSystem(uniquePrefix('overload'), REDIS_URL, { WORKER_TTL_MS: 120_000 });
  let worker: Proc;
  let redis: Redis;
  let queue: Queue;

  before(async () => {
    await system.startGateway({ MAX_QUEUE_DEPTH: 4, REQUEST_TIMEOUT_MS: 3000 });
    worker = system.startWorker({ model: MODEL });
    await system.waitForWorkers(MODEL);
    redis = new Redis(REDIS_URL);
    queue = new Queue(queueNameFor(MODEL), { connection: redis, prefix: system.prefix });
  });
  after(async () => {
    worker.kill('SIGCONT');
    await queue.close();
    redis.disconnect();
    await system.stop();
  });

  it('sheds load past MAX_QUEUE_DEPTH with 503 + Retry-After, without enqueueing', async () => {
    worker.kill('SIGSTOP');
    try {
      const results = await Promise.all(
        Array.from({ length: 12 }, (_, i) => {
          const started = Date.now();
          return system
            .infer(MODEL, `burst ${i}`, undefined, { options: { timeout_ms: 3000 } })
            .then((r) => ({ ...r, ms: Date.now() - started }));
        }),
      );
      const shed = results.filter((r) => r.status === 503);
      const accepted = results.filter((r) => r.status !== 503);
      // The depth estimate errs on the safe side while a refresh races the burst: never more than the cap.
      assert.ok(
        accepted.length >= 1 && accepted.length <= 4,
        `accepted: ${JSON.stringify(results.map((r) => r.status))}`,
      );
      assert.ok(shed.length >= 8);
      for (const r of shed) {
        assert.equal(r.body.error_type, 'overloaded');
        assert.ok(Number(r.headers.get('retry-after')) >= 1, 'Retry-After set');
        assert.ok(r.ms < 2000, `shed at once, not at the 3 s deadline (${r.ms} ms)`);
      }
      // The accepted ones waited for the frozen worker until their deadline.
      for (const r of accepted) assert.equal(r.status, 504, JSON.stringify(r.body));
      assert.ok((await queue.getWaitingCount()) <= 4, 'shed requests were never enqueued');
      // A refusal is logged once, on its request's line, with what refused it.
      const ids = shed.map((r) => r.headers.get('x-request-id')!);
      const linesOf = (id: string) => system.gateway!.output.split('\n').filter((l) => l.includes(id));
      await waitFor("the shed requests' log lines", async () => ids.every((id) => linesOf(id).length > 0), 5000);
      for (const id of ids) {
        const lines = linesOf(id);
        assert.equal(lines.length, 1, lines.join('\n'));
        const entry = JSON.parse(lines[0]);
        assert.equal(entry.status, 503);
        assert.equal(entry.error_type, 'overloaded');
        assert.match(entry.error, /requests waiting/);
      }
      const refusals = system.gateway!.output.split('\n').filter((l) => l.includes('requests waiting; retry shortly'));
      assert.equal(refusals.length, shed.length, `one line per refusal:\n${refusals.join('\n')}`);
    } finally {
      worker.kill('SIGCONT');
    }
    // Once the worker catches up, the model takes requests again.
    await sleep(1000);
    const ok = await system.infer(MODEL, 'after the burst');
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
  });

  it("counts the other gateways' outstanding requests, and forgets a stopped gateway's report", async () => {
    const prefix = uniquePrefix('depths');
    const key = keys.depth(prefix, MODEL);
    const staleMs = 2000;
    // Reports are stamped and judged on Redis's clock, whatever the gateways' clocks say.
    const [secs, micros] = await redis.time();
    const now = Number(secs) * 1000 + Math.floor(Number(micros) / 1000);
    try {
      await redis.hset(key, 'live', `3@${now - 100}`, 'stopped', `5@${now - 10 * staleMs}`, 'garbled', 'x');
      const others = await exchangeDepths(redis, prefix, 'me', new Map([[MODEL, 2]]), staleMs);
      assert.equal(others.get(MODEL), 3, 'the live gateway only');
      assert.deepEqual((await redis.hkeys(key)).sort(), ['live', 'me'], 'the stopped and unreadable reports removed');
      const [count, at] = (await redis.hget(key, 'me'))!.split('@').map(Number);
      assert.ok(count === 2 && at >= now && at - now < staleMs, `its own report stamped by Redis: ${count}@${at}`);
    } finally {
      await redis.del(key);
    }
  });

  it('answers 504 at the deadline and the request never runs', async () => {
    worker.kill('SIGSTOP');
    let res;
    const started = Date.now();
    try {
      res = await system.infer(MODEL, 'too late', undefined, { options: { timeout_ms: 400 } });
    } finally {
      worker.kill('SIGCONT');
    }
    const elapsed = Date.now() - started;
    assert.equal(res.status, 504, JSON.stringify(res.body));
    assert.equal(res.body.error_type, 'timeout');
    assert.ok(elapsed >= 350 && elapsed < 3000, `answered at the client's deadline (${elapsed} ms)`);
    const requestId = res.headers.get('x-request-id')!;
    assert.ok(requestId, 'the 504 names its request id');
    // The worker took the request once thawed and refused it unrun: its job's stored outcome says so.
    const stored = await waitFor('the request settled', () => system.jobReturnValue(MODEL, requestId), 10_000);
    const outcome = stored.outcomes.find((o: { id: string }) => o.id === requestId);
    assert.ok(outcome && !outcome.ok && outcome.error.error_type === 'timeout', JSON.stringify(stored));
    assert.match(outcome.error.error, /deadline passed before the model ran/);
  });

  it('caps a client deadline at REQUEST_TIMEOUT_MS and honours the x-request-timeout-ms header', async () => {
    worker.kill('SIGSTOP');
    try {
      let started = Date.now();
      const capped = await system.infer(MODEL, 'wants forever', undefined, { options: { timeout_ms: 600_000 } });
      let elapsed = Date.now() - started;
      assert.equal(capped.status, 504);
      assert.ok(elapsed >= 2900 && elapsed < 6000, `server cap of 3000 ms applied (${elapsed} ms)`);

      started = Date.now();
      const header = await system.post(`/models/${MODEL}`, { inputs: 'short fuse' }, { 'x-request-timeout-ms': '300' });
      elapsed = Date.now() - started;
      assert.equal(header.status, 504);
      assert.ok(elapsed >= 250 && elapsed < 2900, `header deadline applied (${elapsed} ms)`);
    } finally {
      worker.kill('SIGCONT');
    }
  });
});
