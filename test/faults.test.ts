/**
 * Issue 4, faults caused for real: a worker killed with SIGKILL mid-batch, a result message that
 * never arrives, Redis restarted under load, a worker that cannot load its model, and every worker
 * gone. Nothing accepted is lost, nothing hangs past its deadline, and the system recovers by itself.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { EVENTS_KEPT, announceWorker, queueNameFor, withdrawWorker } from '@tserve/queue';
import { PROTOCOL, type JobData, type JobOutcome, type ReadyBody, type WorkerInfo } from '@tserve/contract';
import { PrivateRedis, TestSystem, freePort, uniquePrefix, waitFor, REDIS_URL } from './helpers/system.ts';
import { textOfTokens } from './helpers/queue-client.ts';
import { CLASSIFIER as MODEL } from './helpers/replicas.ts';

/** Runs `total` requests with `concurrency` in flight; `onProgress` sees each completion count. */
async function load<T>(
  total: number,
  concurrency: number,
  send: (i: number) => Promise<T>,
  onProgress?: (done: number) => void,
): Promise<T[]> {
  const results: T[] = new Array(total);
  let next = 0;
  let done = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        const i = next++;
        results[i] = await send(i);
        onProgress?.(++done);
      }
    }),
  );
  return results;
}

describe('faults', () => {
  {
    it('a worker killed with SIGKILL mid-batch loses no accepted request', async (t) => {
      const system = new TestSystem(uniquePrefix('kill'));
      t.after(() => system.stop());
      await system.startGateway();
      const workerEnv = { DTYPE: 'fp32', JOB_LOCK_MS: 1500, STALLED_INTERVAL_MS: 500, BATCH_MAX_WAIT_MS: 5 };
      const victim = system.startWorker({ model: MODEL, env: { ...workerEnv, WORKER_ID: 'victim' } });
      system.startWorker({ model: MODEL, env: workerEnv });
      await system.waitForWorkers(MODEL, 2);

      // Long-ish inputs keep batches busy, so the kill lands while the victim holds work.
      const texts = Array.from({ length: 24 }, (_, i) => `${textOfTokens(150, 'meal')} number ${i}`);
      const expected = new Map<string, number>();
      for (const t of texts) {
        const r = await system.infer(MODEL, t, { top_k: null });
        assert.equal(r.status, 200);
        expected.set(t, r.body[0].find((x: any) => x.label === 'POSITIVE').score);
      }

      const redis = new Redis(REDIS_URL);
      const queue = new Queue(queueNameFor(MODEL), { connection: redis, prefix: system.prefix });
      t.after(async () => {
        await queue.close();
        redis.disconnect();
      });
      /** Ids of the jobs the victim holds. */
      const victimHolds = async (): Promise<string[]> =>
        (await queue.getActive()).filter((j) => j.processedBy === 'victim').map((j) => j.id!);
      let heldAtDeath: string[] = [];
      let killing = false;
      let killed: Promise<void> | undefined;
      const results = await load(
        192,
        24,
        async (i) => {
          const r = await system.infer(MODEL, texts[i % texts.length], { top_k: null });
          return { ...r, text: texts[i % texts.length] };
        },
        (done) => {
          if (done === 40 && !killing) {
            killing = true;
            killed = (async () => {
              // Frozen first, so that what it holds now can never be answered by it: then killed.
              await waitFor(
                'the victim to hold work',
                async () => {
                  victim.kill('SIGSTOP');
                  heldAtDeath = await victimHolds();
                  if (heldAtDeath.length === 0) victim.kill('SIGCONT');
                  return heldAtDeath.length > 0;
                },
                10_000,
                1,
              );
              victim.kill('SIGKILL');
              // The supervisor's part: a replacement comes up and joins in.
              system.startWorker({ model: MODEL, env: workerEnv });
            })();
          }
        },
      );
      await killed;
      assert.ok(heldAtDeath.length > 0, 'the worker was killed while it held work');
      assert.equal(await victim.exited, null, 'the victim died of its signal');
      const failed = results.filter((r) => r.status !== 200);
      assert.deepEqual(
        failed.map((r) => `${r.status} ${JSON.stringify(r.body)}`),
        [],
        'every accepted request answered',
      );
      for (const r of results) {
        const score = r.body[0].find((x: any) => x.label === 'POSITIVE').score;
        assert.ok(
          Math.abs(score - expected.get(r.text)!) < 1e-5,
          `correct answer after recovery: ${score} vs ${expected.get(r.text)}`,
        );
      }
      // Each job the victim held when it died ran again elsewhere once its lock expired (BullMQ's
      // stalled-job check), every request in it included.
      for (const id of heldAtDeath) {
        const job = await waitFor(
          `job ${id} recovered`,
          async () => {
            const j = await queue.getJob(id);
            return j?.finishedOn && j.processedBy !== 'victim' ? j : undefined;
          },
          30_000,
        );
        assert.ok(
          job.returnvalue.outcomes.every((o: { ok: boolean }) => o.ok),
          JSON.stringify(job.returnvalue),
        );
      }
    });
  }

  it('a result message that never arrives: the gateway reads the finished job and answers from it', async (t) => {
    const system = new TestSystem(uniquePrefix('lost-message'));
    // BullMQ's Worker needs a connection that retries forever.
    const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    const model = 'org/quiet-embedder';
    // The test is the worker: it announces itself, takes the job and completes it, and publishes nothing.
    const info: WorkerInfo = {
      kind: 'worker',
      protocol: PROTOCOL,
      id: 'quiet',
      model,
      state: 'ready',
      task: 'feature-extraction',
      tasks: ['feature-extraction'],
      dtype: 'fp32',
      device: 'cpu',
      pid: 0,
      host: 'test',
      startedAt: 0,
      batchMaxSize: 32,
      batchMaxTokens: 16384,
      maxTokens: 512,
    };
    const worker = new Worker<JobData>(queueNameFor(model), null, {
      connection: redis,
      prefix: system.prefix,
      autorun: false,
      name: 'quiet',
    });
    t.after(async () => {
      await worker.close(true);
      await withdrawWorker(redis, system.prefix, info);
      redis.disconnect();
      await system.stop();
    });
    await system.startGateway({ RESULT_POLL_MS: 200 });
    await announceWorker(redis, system.prefix, info, 60_000);
    await system.waitForWorkers(model);

    const answer = system.infer(model, 'a text nobody publishes the answer of');
    const job = await waitFor('the job', () => worker.getNextJob('quiet', { block: false }), 10_000, 20);
    const outcome: JobOutcome = {
      kind: 'outcome',
      job: job.id!,
      model,
      outcomes: job.data.requests.map((request) => ({
        id: request.id,
        ok: true,
        outputs: [[0.25, -0.5, 1]],
        warnings: [],
        timing: { queue_ms: 1, inference_ms: 1, batch_size: 1 },
      })),
    };
    await job.moveToCompleted(outcome, 'quiet', false);
    const res = await answer;
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.deepEqual(res.body, [0.25, -0.5, 1]);
  });

  it('Redis restarted under load: 503 quickly while down, recovery by itself after', async (t) => {
    const redis = new PrivateRedis(await freePort());
    await redis.start();
    const system = new TestSystem(uniquePrefix('redis-restart'), redis.url);
    t.after(async () => {
      await system.stop();
      await redis.stop();
    });
    // The breaker follows REDIS_COMMAND_TIMEOUT_MS: it opens after ten failed calls, each failing within
    // 500 ms here, and probes again after 1.25 s.
    await system.startGateway({ REDIS_COMMAND_TIMEOUT_MS: 500, REQUEST_TIMEOUT_MS: 15000 });
    system.startWorker({ model: MODEL });
    await system.waitForWorkers(MODEL);

    const warm = await system.infer(MODEL, 'before the outage');
    assert.equal(warm.status, 200);

    await redis.stop();
    const down: Array<{ status: number; ms: number; retryAfter: string | null; body: any }> = [];
    for (let i = 0; i < 15; i++) {
      const started = Date.now();
      const r = await system.infer(MODEL, `during the outage ${i}`);
      down.push({ status: r.status, ms: Date.now() - started, retryAfter: r.headers.get('retry-after'), body: r.body });
    }
    for (const r of down) {
      assert.equal(r.status, 503, JSON.stringify(r.body));
      // Bounds far from the 15 s deadline, so a slow machine cannot blur the two behaviours.
      assert.ok(r.ms < 5000, `503 came quickly, not at the 15 s deadline (${r.ms} ms)`);
      assert.ok(r.retryAfter, 'Retry-After set');
    }
    assert.ok(
      down.some((r) => /circuit breaker/.test(r.body.error)),
      'the breaker opened and refused at once',
    );
    const readyDown = await fetch(`${system.url}/ready`);
    assert.equal(readyDown.status, 503);
    const readyBody = (await readyDown.json()) as ReadyBody;
    assert.ok(
      readyBody.reasons.some((r) => /Redis/.test(r)),
      JSON.stringify(readyBody),
    );
    assert.ok(system.gateway!.running, 'the gateway survived');

    await redis.start();
    await waitFor(
      'a request served after Redis returned',
      async () => (await system.infer(MODEL, 'after the outage')).status === 200,
      30_000,
      250,
    );
    await waitFor(
      '/ready 200 after Redis returned',
      async () => (await fetch(`${system.url}/ready`)).status === 200,
      10_000,
    );
    // Redis came back empty: the gateway wrote the queue's event stream cap again (else BullMQ's scripts
    // would have put back their own default of 10,000).
    const admin = new Redis(redis.url);
    try {
      await waitFor(
        'the events cap restated',
        async () =>
          (await admin.hget(`${system.prefix}:${queueNameFor(MODEL)}:meta`, 'opts.maxLenEvents')) ===
          String(EVENTS_KEPT),
        10_000,
      );
    } finally {
      admin.disconnect();
    }
    assert.ok(
      system.procs.every((p) => p.running),
      'gateway and worker recovered without a restart',
    );
  });

  it('a worker that cannot load its model exits non-zero; the model is reported and answered 503', async (t) => {
    const system = new TestSystem(uniquePrefix('bad-model'));
    t.after(() => system.stop());
    await system.startGateway();
    system.startWorker({ model: MODEL });
    await system.waitForWorkers(MODEL);
    const broken = system.startWorker({ model: 'replica/does-not-exist' });
    const code = await broken.exited;
    assert.notEqual(code, 0);
    assert.match(broken.output, /replica\/does-not-exist/);
    assert.match(broken.output, /shared\/models\/replica\/does-not-exist/, 'names the path it looked in');

    // Not merely listed (a loading worker is listed too): reported as failed to load.
    await waitFor(
      '/ready to report the model as not served',
      async () => {
        const r = await fetch(`${system.url}/ready`);
        const body = (await r.json()) as ReadyBody;
        return r.status === 503 && body.reasons.some((x) => x.includes('model replica/does-not-exist is not served'));
      },
      5000,
    );
    const started = Date.now();
    const r = await system.infer('replica/does-not-exist', 'hello');
    assert.equal(r.status, 503, JSON.stringify(r.body));
    assert.match(r.body.error, /could not load it/);
    assert.ok(Date.now() - started < 5000, 'refused at once, not at the 30 s deadline');
    assert.equal((await system.infer(MODEL, 'the other model is fine')).status, 200);
  });

  it('with every worker gone, requests get 503 or 504 within their deadline, never hang', async (t) => {
    const system = new TestSystem(uniquePrefix('no-workers'));
    t.after(() => system.stop());
    await system.startGateway();
    const worker = system.startWorker({ model: MODEL });
    await system.waitForWorkers(MODEL);
    worker.kill('SIGKILL');
    await worker.exited;

    // At first the worker's heartbeat has not expired: the request waits for its deadline.
    for (let i = 0; i < 3; i++) {
      const started = Date.now();
      const r = await system.infer(MODEL, `anyone there ${i}`, undefined, { options: { timeout_ms: 1000 } });
      const ms = Date.now() - started;
      assert.ok(r.status === 503 || r.status === 504, `${r.status} ${JSON.stringify(r.body)}`);
      assert.ok(ms < 5000, `answered at its 1 s deadline, not hanging (${ms} ms)`);
    }
    // Once the heartbeat expires the gateway knows, and refuses at once.
    await waitFor('heartbeat to expire', async () => (await fetch(`${system.url}/ready`)).status === 503, 5000);
    const started = Date.now();
    const r = await system.infer(MODEL, 'still nobody');
    assert.equal(r.status, 503);
    assert.match(r.body.error, /no live worker/);
    assert.ok(Date.now() - started < 5000, 'refused at once, not at the 30 s deadline');
    const ready = (await (await fetch(`${system.url}/ready`)).json()) as ReadyBody;
    assert.ok(
      ready.reasons.some((x) => x.includes(`model ${MODEL} has no live worker`)),
      JSON.stringify(ready),
    );
  });
});
