/**
 * Issue 13: API keys (401, 403, rotation without a restart), per-key quotas shared by two gateway
 * processes (429 before anything is enqueued), secrets kept out of logs and metrics, and priority
 * classes (interactive requests overtake a queued bulk load). Keys are made with `npm run keys`.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { queueNameFor } from '@tserve/queue';
import { ROOT, TestSystem, uniquePrefix, waitFor, REDIS_URL, type Proc } from './helpers/system.ts';
import { CLASSIFIER as MODEL, NER as OTHER } from './helpers/replicas.ts';

/** Runs the real key command; returns the key it printed once. */
function makeKey(file: string, name: string, ...flags: string[]): string {
  const run = spawnSync(
    process.execPath,
    [path.join(ROOT, 'apps/gateway/dist/cli/keys-cli.js'), 'create', '--name', name, '--file', file, ...flags],
    {
      encoding: 'utf8',
    },
  );
  assert.equal(run.status, 0, run.stderr);
  return run.stdout.trim();
}

/** The secret of a `tsk_<id>_<secret>` token; base64url secrets may themselves hold `_`. */
function secretOf(token: string): string {
  return token.replace(/^tsk_[a-z0-9]+_/, '');
}

function keysCommand(...args: string[]): void {
  const run = spawnSync(process.execPath, [path.join(ROOT, 'apps/gateway/dist/cli/keys-cli.js'), ...args], {
    encoding: 'utf8',
  });
  assert.equal(run.status, 0, run.stderr);
}

describe('API keys, quotas and priorities', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-keys-'));
  const file = path.join(dir, 'keys.json');
  const prefix = uniquePrefix('keys');
  // Two gateways on one Redis and prefix: quotas must hold across them.
  const one = new TestSystem(prefix, REDIS_URL, { WORKER_TTL_MS: 120_000 });
  const two = new TestSystem(prefix, REDIS_URL, { WORKER_TTL_MS: 120_000 });
  let worker: Proc;
  let admin: Redis;
  let queue: Queue;
  const tokens: Record<string, string> = {};

  const call = (
    system: TestSystem,
    token: string | undefined,
    body: unknown = { inputs: 'hello' },
    headers: Record<string, string> = {},
    model = MODEL,
  ) => system.post(`/models/${model}`, body, { ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers });

  before(async () => {
    tokens.alice = makeKey(file, 'alice');
    tokens.bob = makeKey(file, 'bob', '--models', OTHER);
    tokens.carol = makeKey(file, 'carol', '--rate', '3/600');
    tokens.bulk = makeKey(file, 'bulk', '--priority', 'batch');
    const env = { API_KEYS_FILE: file, LOG_LEVEL: 'info' };
    await one.startGateway(env);
    await two.startGateway(env);
    // Pairs of sequences per job and per batch, so that the bulk load below is many jobs.
    worker = one.startWorker({ model: MODEL, env: { BATCH_MAX_SIZE: 2, BATCH_MAX_WAIT_MS: 1000 } });
    await one.waitForWorkers(MODEL);
    await two.waitForWorkers(MODEL);
    admin = new Redis(REDIS_URL);
    queue = new Queue(queueNameFor(MODEL), { connection: admin, prefix });
  });
  after(async () => {
    worker?.kill('SIGCONT');
    await queue.close();
    admin.disconnect();
    await two.stop();
    await one.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a missing, wrong or malformed key with 401 and a Bearer challenge; health routes stay open', async () => {
    const secretless = tokens.alice.slice(0, tokens.alice.length - secretOf(tokens.alice).length);
    for (const token of [undefined, `${secretless}wrong-secret`, 'not-a-key', `${tokens.alice}x`]) {
      const r = await call(one, token);
      assert.equal(r.status, 401, `${token}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error_type, 'unauthorized');
      assert.match(r.headers.get('www-authenticate') ?? '', /^Bearer realm=/);
    }
    for (const route of ['/health', '/ready', '/metrics'])
      assert.equal((await fetch(`${one.url}${route}`)).status, 200, route);
  });

  it('admits a good key as Bearer or x-api-key, and refuses a model the key may not call with 403', async () => {
    assert.equal((await call(one, tokens.alice)).status, 200);
    assert.equal((await one.post(`/models/${MODEL}`, { inputs: 'hi' }, { 'x-api-key': tokens.alice })).status, 200);
    const forbidden = await call(one, tokens.bob);
    assert.equal(forbidden.status, 403, JSON.stringify(forbidden.body));
    assert.equal(forbidden.body.error_type, 'forbidden');
    assert.match(forbidden.body.error, /bob may not call model replica\/tiny-bert-sst2/);
  });

  it('holds a key to its rate across two gateways: 429 with Retry-After and RateLimit headers, nothing enqueued', async () => {
    // What reached the workers: jobs, and lone requests sent straight to a worker.
    const sent = async () =>
      (await queue.getJobCounts('completed')).completed +
      (await one.metric('tserve_direct_requests_total', { model: MODEL })) +
      (await two.metric('tserve_direct_requests_total', { model: MODEL }));
    const sentBefore = await sent();
    const answers = [await call(one, tokens.carol), await call(two, tokens.carol), await call(one, tokens.carol)];
    assert.deepEqual(
      answers.map((r) => r.status),
      [200, 200, 200],
    );
    assert.deepEqual(
      answers.map((r) => r.headers.get('ratelimit-remaining')),
      ['2', '1', '0'],
    );
    const refused = await call(two, tokens.carol, { inputs: 'one too many' });
    assert.equal(refused.status, 429, JSON.stringify(refused.body));
    assert.equal(refused.body.error_type, 'rate_limited');
    assert.ok(Number(refused.headers.get('retry-after')) >= 1);
    assert.equal(refused.headers.get('ratelimit-limit'), '3');
    assert.equal(refused.headers.get('ratelimit-remaining'), '0');
    assert.equal(refused.headers.get('ratelimit-policy'), '3;w=600');
    // Another key is not affected.
    assert.equal((await call(two, tokens.alice)).status, 200);
    await waitFor('four requests sent', async () => (await sent()) === sentBefore + 4, 10_000);
    const metrics = await (await fetch(`${two.url}/metrics`)).text();
    assert.match(metrics, /tserve_quota_rejections_total\{key="carol",reason="rate"\} 1/);
  });

  it('keeps secrets out of logs and metrics, and names the key instead', async () => {
    const logs = one.gateway!.output + two.gateway!.output;
    const metrics =
      (await (await fetch(`${one.url}/metrics`)).text()) + (await (await fetch(`${two.url}/metrics`)).text());
    for (const token of Object.values(tokens)) {
      const secret = secretOf(token);
      assert.equal(secret.length, 43, 'a 32-byte base64url secret');
      assert.ok(!logs.includes(secret) && !metrics.includes(secret), 'a secret leaked');
    }
    assert.match(logs, /"key":"alice"/);
  });

  it("takes a priority only lower than the key's, and says what is wrong with a bad one", async () => {
    const bad = await call(one, tokens.alice, { inputs: 'x' }, { 'x-priority': 'urgent' });
    assert.equal(bad.status, 400);
    assert.match(bad.body.error, /x-priority must be one of interactive, batch/);
    const badBody = await call(one, tokens.alice, { inputs: 'x', options: { priority: 'urgent' } });
    assert.equal(badBody.status, 400);
    assert.match(badBody.body.error, /options\.priority/);
  });

  it('lets interactive requests overtake a queued bulk load', async () => {
    worker.kill('SIGSTOP');
    let bulk: Array<Promise<{ status: number; headers: Headers }>> = [];
    let interactive: Promise<{ status: number; headers: Headers }> | undefined;
    try {
      bulk = Array.from({ length: 8 }, (_, i) => call(one, tokens.bulk, { inputs: `bulk ${i}` }));
      const queued = async () =>
        (await queue.getJobs(['wait', 'prioritized'])).reduce((n, j) => n + (j.data.requests?.length ?? 0), 0);
      await waitFor('the bulk load queued', async () => (await queued()) === 8, 10_000, 20);
      // Sent after the whole bulk load, in the interactive class (alice's), and lowered for one bulk request.
      interactive = call(two, tokens.alice, { inputs: 'me first' });
      await waitFor('the interactive request queued', async () => (await queued()) === 9, 10_000, 20);
    } finally {
      worker.kill('SIGCONT');
    }
    const answers = await Promise.all([interactive, ...bulk]);
    assert.deepEqual(
      answers.map((r) => r.status),
      Array(9).fill(200),
    );
    const started = async (requestId: string) => {
      const jobs = await queue.getJobs(['completed']);
      const job = jobs.find((j) => j.data.requests.some((r: { id: string }) => r.id === requestId));
      assert.ok(job?.processedOn, `job of ${requestId}`);
      return job.processedOn;
    };
    const first = await started(answers[0].headers.get('x-request-id')!);
    for (const r of answers.slice(1)) {
      assert.ok(
        first <= (await started(r.headers.get('x-request-id')!)),
        'the interactive job was taken before every bulk job',
      );
    }
  });

  it('rotates keys without a restart: a revoked key is refused, a new one admitted', async () => {
    const id = /^tsk_([a-z0-9]+)_/.exec(tokens.alice)![1];
    keysCommand('revoke', id, '--file', file);
    await waitFor(
      'alice revoked on both gateways',
      async () => (await call(one, tokens.alice)).status === 401 && (await call(two, tokens.alice)).status === 401,
      10_000,
      200,
    );
    const fresh = makeKey(file, 'alice-2');
    await waitFor(
      'the new key admitted',
      async () => (await call(one, fresh)).status === 200 && (await call(two, fresh)).status === 200,
      10_000,
      200,
    );
  });
});
