/**
 * Issue 5, graceful shutdown and rolling restart: SIGTERM makes a worker finish the batch in hand
 * and a gateway answer what is in flight; replacing workers one by one under load loses nothing.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { keys, queueNameFor } from '@tserve/queue';
import type { ReadyBody } from '@tserve/contract';
import { TestSystem, uniquePrefix, waitFor, REDIS_URL } from './helpers/system.ts';
import { QueueClient, textOfTokens } from './helpers/queue-client.ts';
import { CLASSIFIER as MODEL } from './helpers/replicas.ts';

describe('graceful shutdown', () => {
  it('a worker on SIGTERM finishes its batch, publishes it, leaves the rest queued, and exits 0', async (t) => {
    const system = new TestSystem(uniquePrefix('worker-term'));
    t.after(() => system.stop());
    const direct = new QueueClient(REDIS_URL, system.prefix, MODEL);
    await direct.start();
    const redis = new Redis(REDIS_URL);
    const queue = new Queue(queueNameFor(MODEL), { connection: redis, prefix: system.prefix });
    t.after(async () => {
      await direct.close();
      await queue.close();
      redis.disconnect();
    });

    const text = textOfTokens(500, 'slow');
    const ids = await Promise.all(Array.from({ length: 64 }, () => direct.add([text])));
    const worker = system.startWorker({ model: MODEL, env: { BATCH_MAX_SIZE: 8, BATCH_MAX_WAIT_MS: 1000 } });
    // SIGTERM once a first batch is published: a full one (BATCH_MAX_SIZE), as 64 jobs were waiting.
    const first = await Promise.race(ids.map((id) => direct.outcome(id)));
    assert.ok(first.ok && first.timing.batch_size === 8, JSON.stringify(first));
    worker.kill('SIGTERM');
    assert.equal(await worker.exited, 0, worker.output);

    const states = await Promise.all(ids.map((id) => direct.jobState(id)));
    const completed = states.filter((s) => s === 'completed').length;
    assert.equal(
      states.filter((s) => s === 'active').length,
      0,
      `no job left locked by the stopped worker: ${states.join(',')}`,
    );
    assert.ok(completed >= 8 && completed < 64, `its batches finished (${completed} completed)`);
    assert.equal(completed + states.filter((s) => s === 'waiting').length, 64, 'the rest wait for another worker');

    // Every completed job's result was published before the worker exited.
    const published = await Promise.all(
      ids.filter((_, i) => states[i] === 'completed').map((id) => direct.outcome(id, 1000)),
    );
    assert.ok(published.every((o) => o.ok));

    // A successor serves the rest: nothing was lost.
    system.startWorker({ model: MODEL });
    const rest = await Promise.all(ids.map((id) => direct.outcome(id, 60_000)));
    assert.ok(rest.every((o) => o.ok));
  });

  it('a gateway on SIGTERM stops accepting, answers the requests in flight, and exits 0', async (t) => {
    const system = new TestSystem(uniquePrefix('gateway-term'), REDIS_URL, { WORKER_TTL_MS: 60_000 });
    t.after(() => system.stop());
    await system.startGateway();
    const worker = system.startWorker({ model: MODEL });
    await system.waitForWorkers(MODEL);

    worker.kill('SIGSTOP');
    const inFlight = Array.from({ length: 10 }, (_, i) => system.infer(MODEL, `in flight ${i}`));
    const depth = async () =>
      ((await (await fetch(`${system.url}/ready`)).json()) as ReadyBody).models[MODEL]?.queue_depth;
    await waitFor('the ten requests accepted', async () => (await depth()) === 10, 10_000, 20);
    system.gateway!.kill('SIGTERM');
    // New connections are refused while the old requests are still being answered.
    await waitFor(
      'new connections refused after SIGTERM',
      () =>
        fetch(`${system.url}/health`).then(
          () => false,
          () => true,
        ),
      10_000,
      20,
    );
    assert.ok(system.gateway!.running, 'the gateway still runs, answering what it accepted');
    worker.kill('SIGCONT');
    const answers = await Promise.all(inFlight);
    assert.deepEqual(
      answers.map((a) => a.status),
      Array(10).fill(200),
    );
    assert.equal(await system.gateway!.exited, 0, system.gateway!.output);
  });

  it('a rolling restart of the workers under load loses no request', async (t) => {
    // Production's heartbeat TTL: workers leave the registry themselves on SIGTERM, and a tighter TTL
    // would only test whether a starved machine keeps up with heartbeats.
    const system = new TestSystem(uniquePrefix('rolling'), REDIS_URL, { WORKER_TTL_MS: 5000 });
    t.after(() => system.stop());
    await system.startGateway();
    const first = [system.startWorker({ model: MODEL }), system.startWorker({ model: MODEL })];
    await system.waitForWorkers(MODEL, 2);

    let stop = false;
    const answers: Array<{ status: number; body: unknown }> = [];
    const loadLoop = Promise.all(
      Array.from({ length: 8 }, async (_, c) => {
        for (let i = 0; !stop; i++) {
          const r = await system.infer(MODEL, `rolling ${c} ${i}`);
          answers.push({ status: r.status, body: r.body });
        }
      }),
    );
    const answered = (n: number) => waitFor(`${n} answers`, async () => answers.length >= n, 30_000, 20);
    await answered(20);
    const redis = new Redis(REDIS_URL);
    t.after(async () => void redis.disconnect());
    for (const [i, old] of first.entries()) {
      old.kill('SIGTERM');
      assert.equal(await old.exited, 0, old.output);
      // Ready means announced in Redis as ready, not merely loading. (The gateway's /ready may still
      // count the worker just stopped until its next refresh, so a count there proves nothing.)
      const id = `replacement-${i}`;
      const replacement = system.startWorker({ model: MODEL, env: { WORKER_ID: id } });
      await waitFor(
        'replacement live',
        async () => {
          if (!replacement.running) throw new Error(`the replacement exited:\n${replacement.output}`);
          const announced = await redis.get(keys.worker(system.prefix, id));
          return announced !== null && JSON.parse(announced).state === 'ready';
        },
        30_000,
      );
    }
    // Some load on the replacements alone before stopping.
    await answered(answers.length + 20);
    stop = true;
    await loadLoop;
    const failed = answers.filter((a) => a.status !== 200);
    assert.deepEqual(
      failed.map((a) => `${a.status} ${JSON.stringify(a.body)}`),
      [],
      `every request answered 200 (${answers.length} sent)\n${system.logs()}`,
    );
  });
});
