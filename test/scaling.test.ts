/**
 * Issue 46: from zero workers to many. A gateway configured with a model (MODELS) and no worker
 * takes a request for it that waits, counts it in the backlog the autoscaler reads, and answers it
 * once a worker starts; with the worker gone and no traffic the backlog is 0 again. Without
 * x-wait-for-model each protocol answers 503 "currently loading" in its own shape, with the model's
 * last measured load time, and the refusal counts in the backlog too. Then workers on several hosts:
 * two worker processes started directly (no launcher), each with its own WORKER_ID and REDIS_URL and
 * a wall clock 2 s off (one ahead, one behind), join and take work.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { Redis } from 'ioredis';
import { keys } from '@tserve/queue';
import type { ReadyBody } from '@tserve/contract';
import { REDIS_URL, ROOT, TestSystem, uniquePrefix, waitFor } from './helpers/system.ts';
import { CLASSIFIER } from './helpers/replicas.ts';

const MODEL = CLASSIFIER;

async function backlog(system: TestSystem, model = MODEL): Promise<number> {
  const res = await fetch(`${system.url}/backlog?model=${encodeURIComponent(model)}`);
  assert.equal(res.status, 200);
  return ((await res.json()) as { backlog: number }).backlog;
}

async function ready(system: TestSystem): Promise<{ status: number; body: ReadyBody }> {
  const res = await fetch(`${system.url}/ready`);
  return { status: res.status, body: (await res.json()) as ReadyBody };
}

const kserveBody = (text: string) => ({ inputs: [{ name: 'text', datatype: 'BYTES', shape: [1], data: [text] }] });

describe('a model scaled to zero', () => {
  const system = new TestSystem(uniquePrefix('zero'));
  const redis = new Redis(REDIS_URL);

  before(async () => {
    await system.startGateway({ MODELS: MODEL });
  });
  after(async () => {
    redis.disconnect();
    await system.stop();
  });

  it('waits for a worker with x-wait-for-model, counted in the backlog, and the backlog is 0 again after', async (t) => {
    // A configured model with no worker: idle, and the gateway ready to take the request that wakes one.
    const before = await ready(system);
    assert.equal(before.status, 200, JSON.stringify(before.body));
    assert.equal(before.body.models[MODEL]?.scaled_to_zero, true, JSON.stringify(before.body));
    assert.equal(await backlog(system), 0);
    // KServe's server readiness likewise; the model itself is not ready until a worker serves it.
    assert.equal((await fetch(`${system.url}/v2/health/ready`)).status, 200);
    assert.deepEqual(await (await fetch(`${system.url}/v2/models/${MODEL}/ready`)).json(), {
      name: MODEL,
      ready: false,
    });

    // 1. Requests that wait: the Inference API's and, with the same header, KServe's.
    const waiting = system.post(`/models/${MODEL}`, { inputs: 'a request from zero' }, { 'x-wait-for-model': 'true' });
    const waitingV2 = system.post(`/v2/models/${MODEL}/infer`, kserveBody('another from zero'), {
      'x-wait-for-model': 'true',
    });
    // 2. The backlog reads them.
    const peak = await waitFor('the backlog to count the waiting requests', async () => {
      const value = await backlog(system);
      return value >= 2 && value;
    });
    // 3. A worker starts, as the autoscaler would start one.
    const worker = system.startWorker({ model: MODEL });
    // 4. The requests complete.
    const [answered, answeredV2] = await Promise.all([waiting, waitingV2]);
    assert.equal(answered.status, 200, JSON.stringify(answered.body));
    assert.ok(
      Array.isArray(answered.body) && typeof answered.body[0][0].label === 'string',
      JSON.stringify(answered.body),
    );
    assert.equal(answeredV2.status, 200, JSON.stringify(answeredV2.body));
    assert.equal(answeredV2.body.outputs[0].shape[0], 1, JSON.stringify(answeredV2.body));
    // 5. With the worker stopped and no traffic, the signal is 0, and the model idle again.
    await worker.stop('SIGTERM');
    await waitFor(
      'the model idle again',
      async () => (await ready(system)).body.models[MODEL]?.scaled_to_zero === true,
      10_000,
      50,
    );
    await waitFor('the backlog at 0', async () => (await backlog(system)) === 0, 10_000, 50);
    t.diagnostic(`backlog ${peak} while waiting, 0 after`);
  });

  it('without x-wait-for-model every protocol answers 503 "currently loading" in its own shape, counted in the backlog', async () => {
    // The worker of the test before measured its load; the estimate is that time, whole seconds.
    const loadMs = Number(await redis.hget(keys.loadTimes(system.prefix), MODEL));
    assert.ok(loadMs > 0, 'a load time recorded');
    const estimated = Math.max(1, Math.ceil(loadMs / 1000));
    // A short deadline: a refused request counts until a worker serves the model or its deadline passes.
    const short = { 'x-request-timeout-ms': '1500' };
    const message = `Model ${MODEL} is currently loading`;

    const hf = await system.post(`/models/${MODEL}`, { inputs: 'hello' }, short);
    assert.equal(hf.status, 503, JSON.stringify(hf.body));
    assert.deepEqual(hf.body, { error: message, error_type: 'unavailable', estimated_time: estimated });
    assert.equal(hf.headers.get('retry-after'), String(estimated));

    const openai = await system.post('/v1/embeddings', { model: MODEL, input: 'hello' }, short);
    assert.equal(openai.status, 503, JSON.stringify(openai.body));
    assert.equal(openai.body.error.message, message);
    assert.equal(openai.body.error.type, 'server_error');

    // TEI: the only configured model, with none served, is the one a request naming none means.
    const tei = await system.post('/predict', { inputs: 'hello' }, short);
    assert.equal(tei.status, 503, JSON.stringify(tei.body));
    assert.deepEqual(tei.body, { error: message, error_type: 'Unhealthy' });

    const v2 = await system.post(`/v2/models/${MODEL}/infer`, kserveBody('hello'), short);
    assert.equal(v2.status, 503, JSON.stringify(v2.body));
    assert.deepEqual(v2.body, { error: message });
    assert.equal(v2.headers.get('retry-after'), String(estimated));

    // Each refusal is demand the autoscaler must see, until its deadline passes.
    assert.ok((await backlog(system)) >= 4, 'the refusals count in the backlog');
    await waitFor(
      'the refusals to leave the backlog at their deadline',
      async () => (await backlog(system)) === 0,
      10_000,
      50,
    );

    // A model neither configured nor announced is still not served.
    const unknown = await system.infer('replica/no-such-model', 'hello');
    assert.equal(unknown.status, 404, JSON.stringify(unknown.body));
  });
});

/** A process whose wall clock is `skewMs` off: Date.now() and new Date() read it (test/helpers/clock-skew.mjs). */
const skewed = (skewMs: number) => ({
  nodeArgs: ['--import', path.join(ROOT, 'test/helpers/clock-skew.mjs')],
  env: { CLOCK_SKEW_MS: skewMs },
});

describe('workers on several hosts', () => {
  it("the clock-skew preload sets a process's wall clock off", () => {
    const { nodeArgs, env } = skewed(-5000);
    const run = spawnSync(process.execPath, [...nodeArgs, '-e', 'console.log(Date.now(), new Date().getTime())'], {
      env: { PATH: process.env.PATH, CLOCK_SKEW_MS: String(env.CLOCK_SKEW_MS) },
      encoding: 'utf8',
    });
    const [now, date] = run.stdout.trim().split(' ').map(Number);
    for (const read of [now, date])
      assert.ok(
        Math.abs(read - (Date.now() - 5000)) < 1000,
        `the child read ${read - Date.now()} ms off: ${run.stderr}`,
      );
  });

  const system = new TestSystem(uniquePrefix('hosts'));
  const redis = new Redis(REDIS_URL);
  // Two spellings of the one Redis, as two hosts would each name it: a worker needs nothing else to join.
  const hosts = [
    { id: 'host-a-worker', url: REDIS_URL, skewMs: 2000 },
    { id: 'host-b-worker', url: REDIS_URL.replace('127.0.0.1', 'localhost').replace(/\/?$/, '/0'), skewMs: -2000 },
  ];
  const announcement = async (id: string) => JSON.parse((await redis.get(keys.worker(system.prefix, id))) ?? 'null');

  let spawnedAt = 0;

  before(async () => {
    await system.startGateway();
    spawnedAt = Date.now();
    for (const host of hosts) {
      const { nodeArgs, env } = skewed(host.skewMs);
      system.startWorker({ model: MODEL, nodeArgs, env: { ...env, WORKER_ID: host.id, REDIS_URL: host.url } });
    }
  });
  after(async () => {
    redis.disconnect();
    await system.stop();
  });

  it('two workers started directly, each with its own WORKER_ID and REDIS_URL and a clock 2 s off, join and both take work', async (t) => {
    await system.waitForWorkers(MODEL, 2);
    // The preload took: each worker started, by its own clock, as far off the time it was started as asked.
    const now = Date.now();
    for (const host of hosts) {
      const info = await announcement(host.id);
      assert.ok(info, `${host.id} announced`);
      const [from, to] = [spawnedAt + host.skewMs - 100, now + host.skewMs + 100];
      assert.ok(
        info.startedAt >= from && info.startedAt <= to,
        `${host.id} started at ${info.startedAt}, by its clock; expected ${from} to ${to}`,
      );
    }
    // Load until both have run model calls beyond their warm-up (bounded in rounds, not in time).
    const busyMs = () =>
      Promise.all(hosts.map(async (h) => ((await announcement(h.id))?.modelBusyMs as number | undefined) ?? 0));
    const warm = await busyMs();
    let rounds = 0;
    const busy = async () => (await busyMs()).every((ms, i) => ms > warm[i]);
    while (!(await busy()) && rounds < 50) {
      rounds++;
      const statuses = await Promise.all(
        Array.from({ length: 32 }, (_, i) => system.infer(MODEL, `round ${rounds} text ${i}`).then((r) => r.status)),
      );
      assert.ok(
        statuses.every((s) => s === 200),
        `every request answered: ${statuses.join(',')}`,
      );
    }
    await waitFor('both workers to report model calls', busy, 5000, 50);
    // Still both counted after many heartbeats with clocks 4 s apart.
    assert.equal((await ready(system)).body.models[MODEL]?.workers, 2);
    t.diagnostic(`both took work within ${rounds} round(s) of 32 requests`);
  });
});

describe('gateways on several hosts', () => {
  const system = new TestSystem(uniquePrefix('gateways'));
  // A second gateway on the same Redis and prefix, on a host whose clock is 3 s behind.
  const behind = new TestSystem(system.prefix);

  before(async () => {
    await system.startGateway({ MODELS: MODEL });
    const { nodeArgs, env } = skewed(-3000);
    await behind.startGateway({ MODELS: MODEL, ...env }, nodeArgs);
  });
  after(async () => {
    // Its gateway only: the prefix is the first system's, cleaned by its own stop().
    await Promise.all(behind.procs.map((p) => p.stop('SIGKILL')));
    await system.stop();
  });

  it("count each other's requests in the backlog with clocks 3 s apart, and drop a request whose client left", async () => {
    const controller = new AbortController();
    const waiting = fetch(`${behind.url}/models/${MODEL}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-wait-for-model': 'true' },
      body: JSON.stringify({ inputs: 'waiting at the gateway behind' }),
      signal: controller.signal,
    }).catch(() => 'left');
    // Read from the other gateway: the count crossed over, stamped on Redis's clock.
    await waitFor(
      "the first gateway to count the other gateway's waiting request",
      async () => (await backlog(system)) >= 1,
      10_000,
      50,
    );
    controller.abort();
    assert.equal(await waiting, 'left');
    for (const g of [behind, system])
      await waitFor('the backlog at 0 once the client left', async () => (await backlog(g)) === 0, 10_000, 50);
  });
});
