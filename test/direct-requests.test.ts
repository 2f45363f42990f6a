/**
 * Issue 9, direct requests: interactive requests go straight to a worker in direct entries (a lone
 * request, or those that coalesced behind the last entry), not as BullMQ jobs, for a fraction of a
 * job's Redis commands. What BullMQ gives a job still holds: an entry that no live worker holds
 * within a poll period (none was free, or the one that took it died) is taken back and its requests
 * sent as a job, and answered.
 */
import { describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { announceWorker, keys, queueNameFor } from '@tserve/queue';
import type { ReadyBody, WorkerInfo } from '@tserve/contract';
import { PrivateRedis, TestSystem, freePort, uniquePrefix, waitFor, REDIS_URL } from './helpers/system.ts';
import { textOfTokens } from './helpers/direct-queue.ts';
import { CLASSIFIER, SLOW_CLASSIFIER } from './helpers/replicas.ts';

const positive = (body: any) => body[0].find((x: { label: string }) => x.label === 'POSITIVE').score as number;

/** A request of `count` inputs of `tokens` tokens each, which keeps a worker's model busy for a while. */
const longRequest = (system: TestSystem, model: string, count: number, tokens: number) =>
  system.infer(
    model,
    Array.from({ length: count }, (_, i) => `${textOfTokens(tokens, 'meal')} ${i}`),
  );

/** A system of its own, a Redis connection and the model's queue, all closed after the test. */
function setUp(t: TestContext, name: string, model: string) {
  const system = new TestSystem(uniquePrefix(name));
  const admin = new Redis(REDIS_URL);
  const queue = new Queue(queueNameFor(model), { connection: admin, prefix: system.prefix, skipMetasUpdate: true });
  t.after(async () => {
    await queue.close();
    admin.disconnect();
    await system.stop();
  });
  return { system, admin, queue };
}

/** Waits until the gateway has sent `n` requests straight to the model's workers. */
const sentDirect = (system: TestSystem, model: string, n: number, what: string) =>
  waitFor(what, async () => (await system.metric('tserve_direct_requests_total', { model })) === n, 10_000, 5);

/** The calls of each command Redis ran since its stats were reset, the measuring itself left out. */
async function commandsRun(redis: Redis): Promise<Map<string, number>> {
  const text = await redis.info('commandstats');
  const calls = new Map<string, number>();
  for (const [, name, n] of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) if (!['info', 'config|resetstat'].includes(name)) calls.set(name, Number(n));
  return calls;
}

describe('direct requests', () => {
  it('a lone request goes straight to a worker, not as a job, for at most 15 Redis commands, with the answer a job gets', async (t) => {
    // A Redis of its own, so that its command counts are this system's alone.
    const redis = new PrivateRedis(await freePort());
    await redis.start();
    const system = new TestSystem(uniquePrefix('direct'), redis.url);
    const jobsOnly = new TestSystem(system.prefix, redis.url);
    const admin = new Redis(redis.url);
    const queue = new Queue(queueNameFor(CLASSIFIER), { connection: admin, prefix: system.prefix, skipMetasUpdate: true });
    t.after(async () => {
      await queue.close();
      admin.disconnect();
      await jobsOnly.stop();
      await system.stop();
      await redis.stop();
    });
    await system.startGateway();
    const jobsGateway = await jobsOnly.startGateway({ DIRECT_REQUESTS: 'false' });
    system.startWorker({ model: CLASSIFIER, env: { DTYPE: 'fp32' } });
    await system.waitForWorkers(CLASSIFIER);
    await jobsOnly.waitForWorkers(CLASSIFIER);

    const texts = Array.from({ length: 30 }, (_, i) => `a lone request, number ${i}, was ${i % 2 ? 'lovely' : 'dreadful'}`);
    const asJobs: number[] = [];
    for (const text of texts.slice(0, 5)) asJobs.push(positive((await jobsOnly.infer(CLASSIFIER, text, { top_k: null })).body));
    await waitFor('five jobs recorded', async () => (await queue.getCompletedCount()) === 5, 10_000);
    // Its registry and depth reads would count too.
    await jobsGateway.stop();

    await admin.config('RESETSTAT');
    const answers: Array<Awaited<ReturnType<TestSystem['infer']>>> = [];
    for (const text of texts) answers.push(await system.infer(CLASSIFIER, text, { top_k: null }));
    const run = await commandsRun(admin);
    const perRequest = [...run.values()].reduce((a, b) => a + b, 0) / texts.length;

    for (const r of answers) assert.equal(r.status, 200, JSON.stringify(r.body));
    asJobs.forEach((score, i) =>
      assert.ok(Math.abs(positive(answers[i].body) - score) < 1e-6, `request ${i}: ${positive(answers[i].body)} direct, ${score} as a job`),
    );
    assert.equal(await system.metric('tserve_direct_requests_total', { model: CLASSIFIER }), texts.length);
    assert.equal(await queue.getCompletedCount(), 5, 'no job for any of them');
    // A job costs about 45 (BullMQ's three scripts run about 40 commands inside Redis).
    assert.ok(perRequest <= 15, `${perRequest.toFixed(1)} Redis commands per request`);
    // LLEN runs only inside the worker's look for more work: a lone request that wakes an idle worker skips it.
    assert.equal(run.get('llen') ?? 0, 0, 'the worker looked for more work beside a lone request');
    const stored = JSON.parse((await admin.get(keys.directState(system.prefix, answers[0].headers.get('x-request-id')!)))!);
    assert.deepEqual(stored.outcomes[0].outputs, answers[0].body, "the outcome is kept for the gateway's fallback read");
  });

  it('requests that coalesce while the worker is busy go in shared direct entries, not jobs, each with its own answer', async (t) => {
    const { system, admin, queue } = setUp(t, 'direct-group', CLASSIFIER);
    // A poll period longer than the long request: an entry still waiting for the busy worker after a
    // period is taken back and sent as a job (the unpopped-entries test below), which on a slow
    // machine made a job of the short ones here.
    await system.startGateway({ RESULT_POLL_MS: 30_000 });
    system.startWorker({ model: CLASSIFIER, env: { DTYPE: 'fp32' } });
    await system.waitForWorkers(CLASSIFIER);

    // A long request keeps the model busy; the short ones sent meanwhile wait in the gateway for the
    // worker to take what went before them, then go together.
    const long = longRequest(system, CLASSIFIER, 32, 400);
    await sentDirect(system, CLASSIFIER, 1, 'the long request sent straight to the worker');
    const texts = Array.from({ length: 6 }, (_, i) => `short request ${i} was ${i % 2 ? 'lovely' : 'dreadful'}`);
    const together = await Promise.all(texts.map((text) => system.infer(CLASSIFIER, text, { top_k: null })));
    assert.equal((await long).status, 200);
    for (const r of together) assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(await system.metric('tserve_direct_requests_total', { model: CLASSIFIER }), 1 + texts.length);
    const counts = await queue.getJobCounts('waiting', 'active', 'completed', 'failed', 'prioritized');
    assert.deepEqual(counts, { waiting: 0, active: 0, completed: 0, failed: 0, prioritized: 0 }, 'no job for any of them');
    // An entry's outcomes are stored under its first request's id.
    const stored = await admin.mget(together.map((r) => keys.directState(system.prefix, r.headers.get('x-request-id')!)));
    const entries = stored.filter((raw) => raw !== null).map((raw) => (JSON.parse(raw) as { outcomes: unknown[] }).outcomes.length);
    assert.equal(
      entries.reduce((a, b) => a + b, 0),
      texts.length,
    );
    assert.ok(entries.length < texts.length, `entries of ${entries.join(', ')} requests`);
    // Each answer is its own request's: the same as the text alone gets (fp32: batching changes nothing).
    for (const [i, text] of texts.entries()) {
      const alone = await system.infer(CLASSIFIER, text, { top_k: null });
      assert.ok(
        Math.abs(positive(alone.body) - positive(together[i].body)) < 1e-5,
        `request ${i}: ${positive(together[i].body)} with others, ${positive(alone.body)} alone`,
      );
    }
  });

  it('a worker killed holding direct requests: each is sent again as a job and answered by another worker', async (t) => {
    const { system, admin, queue } = setUp(t, 'direct-kill', SLOW_CLASSIFIER);
    await system.startGateway({ RESULT_POLL_MS: 300 });
    const victim = system.startWorker({ model: SLOW_CLASSIFIER, env: { WORKER_ID: 'victim' } });
    await system.waitForWorkers(SLOW_CLASSIFIER);
    /** The state keys of the direct requests the victim holds, once there are `count`. */
    const victimHolds = (count: number) => async () => {
      const found = await admin.keys(keys.directState(system.prefix, '*'));
      const states = found.length ? await admin.mget(found) : [];
      const held = found.filter((_, i) => states[i] === JSON.stringify({ takenBy: 'victim' }));
      return held.length === count ? held : undefined;
    };

    // A long request keeps the victim's model busy; the lone request after it goes direct too, and
    // the victim takes it while the model still runs the first (it fetches ahead).
    const long = longRequest(system, SLOW_CLASSIFIER, 24, 300);
    const [longKey] = await waitFor('the victim took the long request', victimHolds(1), 20_000, 5);
    const short = system.infer(SLOW_CLASSIFIER, 'a short request that waits behind the long one');
    const held = await waitFor('the victim took the short one too', victimHolds(2), 20_000, 5);
    const shortId = held
      .find((key) => key !== longKey)!
      .split(':')
      .pop()!;
    victim.kill('SIGKILL');
    system.startWorker({ model: SLOW_CLASSIFIER, env: { WORKER_ID: 'rescuer' } });

    const [longAnswer, shortAnswer] = await Promise.all([long, short]);
    assert.equal(longAnswer.status, 200, JSON.stringify(longAnswer.body));
    assert.equal(longAnswer.body.length, 24);
    assert.equal(shortAnswer.status, 200, JSON.stringify(shortAnswer.body));
    assert.equal(shortAnswer.headers.get('x-request-id'), shortId);
    const job = await queue.getJob(shortId);
    assert.equal(job?.processedBy, 'rescuer', 'sent again as a job, which the other worker ran');
    assert.equal(await system.metric('tserve_direct_requests_requeued_total', { model: SLOW_CLASSIFIER }), 2);
  });

  it('a worker stopped with SIGTERM answers the direct request it holds itself: no gateway sends it again', async (t) => {
    const system = new TestSystem(uniquePrefix('direct-drain'));
    const admin = new Redis(REDIS_URL);
    t.after(async () => {
      admin.disconnect();
      await system.stop();
    });
    // Polls every 100 ms: a request held longer is looked up several times while its worker drains.
    await system.startGateway({ RESULT_POLL_MS: 100 });
    const worker = system.startWorker({ model: SLOW_CLASSIFIER, env: { WORKER_ID: 'draining' } });
    await system.waitForWorkers(SLOW_CLASSIFIER);

    const long = longRequest(system, SLOW_CLASSIFIER, 32, 400);
    await waitFor(
      'the worker took it',
      async () => {
        const found = await admin.keys(keys.directState(system.prefix, '*'));
        return found.length === 1 && (await admin.get(found[0])) === JSON.stringify({ takenBy: 'draining' });
      },
      20_000,
      5,
    );
    worker.kill('SIGTERM');
    const answer = await long;
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(await worker.exited, 0, worker.output);
    assert.equal(await system.metric('tserve_direct_requests_requeued_total', { model: SLOW_CLASSIFIER }), 0);
  });

  it('a direct request whose client left is skipped unrun by the worker that holds it', async (t) => {
    const system = new TestSystem(uniquePrefix('direct-cancel'));
    t.after(() => system.stop());
    await system.startGateway();
    system.startWorker({ model: SLOW_CLASSIFIER });
    await system.waitForWorkers(SLOW_CLASSIFIER);
    const skippedBefore = await system.metric('tserve_requests_skipped_total', { model: SLOW_CLASSIFIER });

    // The worker takes the second request while the model still runs the first (it fetches ahead).
    const long = longRequest(system, SLOW_CLASSIFIER, 24, 300);
    await sentDirect(system, SLOW_CLASSIFIER, 1, 'the long request sent straight to the worker');
    const leaving = system.leavingRequest(SLOW_CLASSIFIER, 'nobody will read this answer');
    await sentDirect(system, SLOW_CLASSIFIER, 2, 'the second sent straight to the worker too');
    leaving.leave();
    assert.equal(await leaving.left, 'aborted');
    assert.equal((await long).status, 200);
    await waitFor(
      'the skip counted',
      async () => (await system.metric('tserve_requests_skipped_total', { model: SLOW_CLASSIFIER })) === skippedBefore + 1,
      10_000,
      20,
    );
  });

  it('direct entries that no worker pops within a poll period are taken back and queued as jobs', async (t) => {
    // Stopping the system removes the ghost's announcement with the rest of its prefix.
    const { system, admin, queue } = setUp(t, 'direct-unpopped', CLASSIFIER);
    await system.startGateway({ RESULT_POLL_MS: 300 });
    // A worker that announces itself and never pops: a real one's announcement, under another id.
    const real = system.startWorker({ model: CLASSIFIER, env: { WORKER_ID: 'real' } });
    await system.waitForWorkers(CLASSIFIER);
    const ghost: WorkerInfo = { ...(JSON.parse((await admin.get(keys.worker(system.prefix, 'real')))!) as WorkerInfo), id: 'ghost' };
    await real.stop();
    await announceWorker(admin, system.prefix, ghost, 120_000);
    await waitFor(
      'only the ghost left',
      async () => ((await (await fetch(`${system.url}/ready`)).json()) as ReadyBody).models[CLASSIFIER]?.workers === 1,
      10_000,
    );

    // The first goes alone, and so does the second (nothing was outstanding as the first went, so
    // nothing waits behind it); the two after the second wait for a worker to take it, then (a poll
    // period later, when nobody did) go together as one entry, which nobody pops either.
    // Counted as sent, not looked for in the set: the gateway takes an entry back a poll period after it went.
    const first = system.infer(CLASSIFIER, 'nobody is there to pop this');
    await sentDirect(system, CLASSIFIER, 1, 'sent as a direct entry');
    const second = system.infer(CLASSIFIER, 'nor this');
    await sentDirect(system, CLASSIFIER, 2, 'the second sent as its own entry');
    const more = [system.infer(CLASSIFIER, 'nor this one'), system.infer(CLASSIFIER, 'nor this last one')];
    await waitFor('every entry taken back and queued as a job', async () => (await queue.getWaitingCount()) === 3, 10_000, 10);
    assert.equal(await admin.zcard(keys.directRequests(system.prefix, CLASSIFIER)), 0);
    const sizes = (await queue.getWaiting()).map((job) => (job.data as { requests: unknown[] }).requests.length).sort();
    assert.deepEqual(sizes, [1, 1, 2], 'each entry is sent again as one job');
    system.startWorker({ model: CLASSIFIER });
    for (const answer of await Promise.all([first, second, ...more])) assert.equal(answer.status, 200, JSON.stringify(answer.body));
    assert.equal(await system.metric('tserve_direct_requests_requeued_total', { model: CLASSIFIER }), 4);
  });
});
