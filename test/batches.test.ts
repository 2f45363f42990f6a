/**
 * Issue 60: OpenAI's Batch API on the queue, with the official `openai` client. Each output line
 * is the answer the same request gets alone over HTTP; malformed lines go to the error file while
 * the rest complete; a batch lives through a killed worker and a killed gateway with each line
 * answered once; cancel and expiry stop the lines not yet run; the limits refuse in OpenAI's shape;
 * one key never sees another's files or batches, and a batch's lines run as the key that owns it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import OpenAI, { toFile } from 'openai';
import { Redis } from 'ioredis';
import { PrivateRedis, TestSystem, freePort, uniquePrefix, waitFor } from './helpers/system.ts';
import { CLASSIFIER, EMBEDDER } from './helpers/replicas.ts';
import { assertSameAnswer } from './helpers/answers.ts';

/** Answers that do not depend on batch mates (issue 55), so a line's answer is the same alone and batched. */
const INVARIANT = { DTYPE: 'int8-row' };
const TEXTS = [
  'The soup was cold but the waiter in Paris was friendly.',
  'Fine.',
  'My friend Anna from Berlin said the dessert and the coffee were the best part of a long evening.',
  'A quick brown fox.',
];
/** A model that no worker serves, configured (MODELS): its lines wait for a worker, and never run here. */
const IDLE = 'replica/tiny-bert-ner';

type Batch = OpenAI.Batches.Batch;

function embeddingLine(i: number, url = '/v1/embeddings', model = EMBEDDER): string {
  const input = i % 3 === 0 ? TEXTS[i % TEXTS.length] : [TEXTS[i % TEXTS.length], TEXTS[(i + 1) % TEXTS.length]];
  return JSON.stringify({ custom_id: `line-${i}`, method: 'POST', url, body: { model, input } });
}

/** A line for the classifier, its custom_id `<prefix><i>`. */
function classifierLine(i: number, prefix: string): string {
  return JSON.stringify({
    custom_id: `${prefix}${i}`,
    method: 'POST',
    url: `/models/${CLASSIFIER}`,
    body: { inputs: TEXTS[i % TEXTS.length] },
  });
}

function jsonl(lines: string[]): Promise<Awaited<ReturnType<typeof toFile>>> {
  return toFile(Buffer.from(`${lines.join('\n')}\n`), 'input.jsonl');
}

async function until(client: OpenAI, id: string, done: (b: Batch) => boolean, timeoutMs = 120_000): Promise<Batch> {
  let last: Batch | undefined;
  await waitFor(
    `batch ${id}`,
    async () => {
      last = await client.batches.retrieve(id);
      return done(last);
    },
    timeoutMs,
  ).catch((err: Error) => {
    throw new Error(`${err.message}: last seen ${JSON.stringify(last)}`);
  });
  return last!;
}

/** A model's backlog as the autoscaler reads it. */
async function backlogOf(url: string, model: string): Promise<number> {
  return ((await (await fetch(`${url}/backlog?model=${model}`)).json()) as { backlog: number }).backlog;
}

const ended = (b: Batch) => ['completed', 'failed', 'expired', 'cancelled'].includes(b.status);

async function content(client: OpenAI, id: string | null | undefined): Promise<any[]> {
  if (!id) return [];
  const text = await (await client.files.content(id)).text();
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line));
}

describe('the Batch API', () => {
  const system = new TestSystem(uniquePrefix('batches'));
  let client: OpenAI;

  before(async () => {
    await system.startGateway({ MODELS: IDLE });
    system.startWorker({ model: EMBEDDER, env: INVARIANT });
    await system.waitForWorkers(EMBEDDER);
    client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => system.stop());

  it('runs a batch with the official client; each output line is the answer alone, bad lines go to the error file', async () => {
    const good = Array.from({ length: 40 }, (_, i) => embeddingLine(i));
    const bad = [
      '{"custom_id": "broken", "method": "POST", ',
      embeddingLine(100, '/v1/elsewhere'),
      embeddingLine(101, '/v1/embeddings', 'replica/no-such-model'),
    ];
    const lines = [...good.slice(0, 20), ...bad, ...good.slice(20)];
    const file = await client.files.create({ file: await jsonl(lines), purpose: 'batch' });
    assert.equal(file.purpose, 'batch');
    assert.equal(file.object, 'file');
    assert.ok((await client.files.list()).data.some((f) => f.id === file.id));

    const created = await client.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
      metadata: { corpus: 'test' },
    });
    assert.equal(created.object, 'batch');
    assert.deepEqual(created.metadata, { corpus: 'test' });
    assert.equal(created.request_counts?.total, lines.length);
    const batch = await until(client, created.id, ended);
    assert.equal(batch.status, 'completed', JSON.stringify(batch));
    assert.deepEqual(batch.request_counts, { total: 43, completed: 40, failed: 3 });
    assert.equal(batch.model, EMBEDDER);
    await waitFor('the backlog to empty', async () => (await backlogOf(system.url, EMBEDDER)) === 0);
    assert.ok(batch.completed_at && batch.in_progress_at && batch.finalizing_at);
    assert.ok((await client.batches.list()).data.some((b) => b.id === batch.id));

    const output = await content(client, batch.output_file_id);
    assert.deepEqual(
      output.map((l) => l.custom_id),
      good.map((_, i) => `line-${i}`),
      'the output file, in the order of the input',
    );
    for (const [i, line] of output.entries()) {
      assert.equal(line.error, null);
      assert.equal(line.response.status_code, 200);
      assert.match(line.id, /^batch_req_/);
      const alone = await system.post('/v1/embeddings', JSON.parse(good[i]).body);
      assertSameAnswer(alone.body, line.response.body, `line ${i}`, 1e-5);
    }
    const errors = await content(client, batch.error_file_id);
    assert.deepEqual(
      errors.map((l) => [l.custom_id, l.response?.status_code ?? l.error.code]),
      [
        [null, 'invalid_json'],
        ['line-100', 'invalid_url'],
        ['line-101', 404],
      ],
    );
    assert.equal(errors[2].response.body.error.code, 'model_not_found');

    // What the store counts against FILES_STORE_MAX_MB is what its files hold, once the batch ended.
    const redis = new Redis(system.redisUrl);
    try {
      const counted = Number(await redis.get(`${system.prefix}:offline:bytes`));
      const listed = (await client.files.list()).data.reduce((sum, f) => sum + f.bytes, 0);
      assert.equal(counted, listed);
    } finally {
      redis.disconnect();
    }
  });

  it('cancel stops the lines not yet run; expiry answers them batch_expired', async () => {
    const lines = Array.from({ length: 5 }, (_, i) => embeddingLine(i, '/v1/embeddings', IDLE));
    const file = await client.files.create({ file: await jsonl(lines), purpose: 'batch' });
    const batch = await client.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
    });
    await until(client, batch.id, (b) => b.status === 'in_progress');
    // Its lines count in the model's backlog (what KEDA scales on), until the batch ends.
    const backlog = () => backlogOf(system.url, IDLE);
    assert.ok((await backlog()) >= 5, `backlog ${await backlog()}`);
    const cancelling = await client.batches.cancel(batch.id);
    assert.equal(cancelling.status, 'cancelling');
    const cancelled = await until(client, batch.id, ended);
    assert.equal(cancelled.status, 'cancelled');
    assert.deepEqual(cancelled.request_counts, { total: 5, completed: 0, failed: 0 });
    assert.equal(cancelled.output_file_id, null);
    assert.equal(cancelled.model, IDLE);
    await waitFor('the backlog to empty', async () => (await backlog()) === 0);

    const short = await client.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '2s' as '24h',
    });
    const expired = await until(client, short.id, ended);
    assert.equal(expired.status, 'expired');
    assert.deepEqual(expired.request_counts, { total: 5, completed: 0, failed: 5 });
    const errors = await content(client, expired.error_file_id);
    assert.deepEqual(
      errors.map((l) => l.error.code),
      Array(5).fill('batch_expired'),
    );
  });

  it('refuses a bad batch and unknown ids in OpenAI’s error shape', async () => {
    await assert.rejects(
      client.batches.create({ input_file_id: 'file-nope', endpoint: '/v1/embeddings', completion_window: '24h' }),
      (err: any) => err.status === 404 && /no file file-nope/.test(err.error.message),
    );
    const file = await client.files.create({ file: await jsonl([embeddingLine(0)]), purpose: 'batch' });
    await assert.rejects(
      client.batches.create({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' }),
      (err: any) => err.status === 400 && /endpoint must be one of/.test(err.error.message),
    );
    await assert.rejects(client.batches.retrieve('batch-nope'), (err: any) => err.status === 404);
    await assert.rejects(
      client.files.create({ file: await jsonl([embeddingLine(0)]), purpose: 'fine-tune' }),
      (err: any) => err.status === 400 && /purpose must be "batch"/.test(err.error.message),
    );
    const deleted = await client.files.delete(file.id);
    assert.deepEqual(deleted, { id: file.id, object: 'file', deleted: true });
    await assert.rejects(client.files.retrieve(file.id), (err: any) => err.status === 404);
  });
});

describe('the Batch API on a worker of large model calls', () => {
  const system = new TestSystem(uniquePrefix('batches-wide'));

  before(async () => {
    await system.startGateway();
    // A GPU worker's call size (BATCH_MAX_SIZE's default there), on the CPU.
    system.startWorker({ model: EMBEDDER, env: { BATCH_MAX_SIZE: '128' } });
    await system.waitForWorkers(EMBEDDER);
  });
  after(() => system.stop());

  it("keeps enough lines on their way to fill the worker's model calls", async () => {
    const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const total = 1000;
    // Long inputs: the model, not the gateway sending the lines, is what the lines wait for.
    const long = (i: number) => Array.from({ length: 6 }, (_, k) => TEXTS[(i + k) % TEXTS.length]).join(' ');
    const lines = Array.from({ length: total }, (_, i) =>
      JSON.stringify({
        custom_id: `w${i}`,
        method: 'POST',
        url: '/v1/embeddings',
        body: { model: EMBEDDER, input: long(i) },
      }),
    );
    const file = await client.files.create({ file: await jsonl(lines), purpose: 'batch' });
    const created = await client.batches.create({
      input_file_id: file.id,
      endpoint: '/v1/embeddings',
      completion_window: '24h',
    });
    const batch = await until(client, created.id, ended);
    assert.deepEqual(batch.request_counts, { total, completed: total, failed: 0 });
    // Each line is one sequence: a call of more than 64 held more lines than a window of 64 lets out.
    const answered = await system.metric('tserve_batch_size_count', { model: EMBEDDER });
    const inSmallCalls = await system.metric('tserve_batch_size_bucket', { model: EMBEDDER, le: '64' });
    assert.equal(answered, total);
    assert.ok(inSmallCalls < total, `every line ran in a model call of at most 64 sequences`);
  });
});

describe('the Batch API through faults', () => {
  const system = new TestSystem(uniquePrefix('batches-faults'));
  let client: OpenAI;

  before(async () => {
    await system.startGateway();
    client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(() => system.stop());

  it('a worker and a gateway killed mid-batch: every line answered once, in order', async () => {
    const worker = system.startWorker({ model: CLASSIFIER });
    await system.waitForWorkers(CLASSIFIER);
    const total = 2000;
    const lines = Array.from({ length: total }, (_, i) => classifierLine(i, 'c'));
    const file = await client.files.create({ file: await jsonl(lines), purpose: 'batch' });
    const batch = await client.batches.create({
      input_file_id: file.id,
      endpoint: `/models/${CLASSIFIER}` as '/v1/embeddings',
      completion_window: '24h',
    });
    await until(client, batch.id, (b) => (b.request_counts?.completed ?? 0) > 0);
    await worker.stop('SIGKILL');
    const atKill = await client.batches.retrieve(batch.id);
    assert.ok((atKill.request_counts?.completed ?? 0) < total, 'the worker was killed mid-batch');
    await system.gateway!.stop('SIGKILL');
    await system.startGateway();
    system.startWorker({ model: CLASSIFIER });
    const done = await until(client, batch.id, ended);
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.request_counts, { total, completed: total, failed: 0 });
    const output = await content(client, done.output_file_id);
    assert.deepEqual(
      output.map((l) => l.custom_id),
      lines.map((_, i) => `c${i}`),
    );
    assert.equal(new Set(output.map((l) => l.id)).size, total);
    assert.equal(done.error_file_id, null);
    // Each line left the backlog once, through both deaths.
    await waitFor('the backlog to empty', async () => (await backlogOf(system.url, CLASSIFIER)) === 0);
  });

  it('Redis restarted mid-batch, with the persistence compose configures: every line answered once', async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-aof-'));
    const redis = new PrivateRedis(await freePort(), dir);
    const persisted = new TestSystem(uniquePrefix('batches-aof'), redis.url);
    t.after(async () => {
      await persisted.stop();
      await redis.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    });
    await redis.start();
    await persisted.startGateway();
    persisted.startWorker({ model: CLASSIFIER });
    await persisted.waitForWorkers(CLASSIFIER);
    const c = new OpenAI({ baseURL: `${persisted.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const total = 1000;
    const lines = Array.from({ length: total }, (_, i) => classifierLine(i, 'r'));
    const file = await c.files.create({ file: await jsonl(lines), purpose: 'batch' });
    const batch = await c.batches.create({
      input_file_id: file.id,
      endpoint: `/models/${CLASSIFIER}` as '/v1/embeddings',
      completion_window: '24h',
    });
    await until(c, batch.id, (b) => (b.request_counts?.completed ?? 0) > 0);
    await redis.stop('SIGTERM');
    await redis.start();
    const done = await until(c, batch.id, ended);
    assert.equal(done.status, 'completed');
    assert.deepEqual(done.request_counts, { total, completed: total, failed: 0 });
    const output = await content(c, done.output_file_id);
    assert.deepEqual(
      output.map((l) => l.custom_id),
      lines.map((_, i) => `r${i}`),
    );
    await waitFor('the backlog to empty', async () => (await backlogOf(persisted.url, CLASSIFIER)) === 0);
  });

  it('limits: file size, lines and the store, each refused naming its setting', async () => {
    const limited = new TestSystem(uniquePrefix('batches-limits'));
    try {
      await limited.startGateway({ FILES_MAX_MB: '1', FILES_MAX_LINES: '3', FILES_STORE_MAX_MB: '2' });
      const small = new OpenAI({ baseURL: `${limited.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const refused = async (lines: string[], status: number, pattern: RegExp) =>
        assert.rejects(small.files.create({ file: await jsonl(lines), purpose: 'batch' }), (err: any) => {
          assert.equal(err.status, status, JSON.stringify(err.error));
          assert.match(err.error.message, pattern);
          return true;
        });
      await refused([embeddingLine(0), embeddingLine(1), embeddingLine(2), embeddingLine(3)], 413, /FILES_MAX_LINES/);
      await refused(['x'.repeat(1_100_000)], 413, /FILES_MAX_MB/);
      const big = 'y'.repeat(900_000);
      await small.files.create({ file: await jsonl([big]), purpose: 'batch' });
      await small.files.create({ file: await jsonl([big]), purpose: 'batch' });
      await refused([big], 507, /FILES_STORE_MAX_MB/);
      // A file deleted makes room again, and counts once when two deletes race.
      const [held] = (await small.files.list()).data;
      const deletes = await Promise.allSettled([small.files.delete(held.id), small.files.delete(held.id)]);
      assert.deepEqual(deletes.map((d) => d.status).sort(), ['fulfilled', 'rejected']);
      await small.files.create({ file: await jsonl([big]), purpose: 'batch' });

      const redis = new Redis(limited.redisUrl);
      const redisKeys = () => redis.keys(`${limited.prefix}:offline:file-lines:*`);
      try {
        // An upload whose client goes away part way leaves nothing behind: here its file part had come
        // whole, and the rest of the form had not.
        const socket = net.connect(limited.port, '127.0.0.1');
        await once(socket, 'connect');
        const boundary = 'cut-short';
        socket.write(
          `POST /v1/files HTTP/1.1\r\nhost: x\r\ncontent-type: multipart/form-data; boundary=${boundary}\r\n` +
            `content-length: 900000\r\n\r\n--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="a.jsonl"\r\n\r\n` +
            `${embeddingLine(0)}\n${embeddingLine(1)}\r\n--${boundary}\r\ncontent-disposition: form-data; name="purpose"\r\n\r\nba`,
        );
        // The file part is whole once the next part has begun: wait for the gateway to have read it.
        await waitFor('the file part to be read', async () => (await redisKeys()).length === 3);
        socket.destroy();
        await waitFor('only the two files to stay', async () => {
          const lists = await redisKeys();
          const listed = (await small.files.list()).data;
          const counted = Number(await redis.get(`${limited.prefix}:offline:bytes`));
          return lists.length === 2 && listed.length === 2 && counted === listed.reduce((sum, f) => sum + f.bytes, 0);
        });
      } finally {
        redis.disconnect();
      }
    } finally {
      await limited.stop();
    }
  });

  it('files expire after FILES_TTL_S', async () => {
    const brief = new TestSystem(uniquePrefix('batches-ttl'));
    try {
      await brief.startGateway({ FILES_TTL_S: '1' });
      const c = new OpenAI({ baseURL: `${brief.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const file = await c.files.create({ file: await jsonl([embeddingLine(0)]), purpose: 'batch' });
      assert.ok(file.expires_at && file.expires_at <= file.created_at + 1);
      await waitFor('the file to expire', async () => (await c.files.list()).data.length === 0, 30_000);
      await assert.rejects(c.files.retrieve(file.id), (err: any) => err.status === 404);
    } finally {
      await brief.stop();
    }
  });
});

describe('the Batch API with keys', () => {
  const system = new TestSystem(uniquePrefix('batches-keys'));
  const hash = (secret: string) => `sha256:${createHash('sha256').update(secret).digest('hex')}`;
  const owner = new OpenAI({ apiKey: 'tsk_owner1_secret', maxRetries: 0 });
  const other = new OpenAI({ apiKey: 'tsk_other1_secret2', maxRetries: 0 });

  before(async () => {
    await system.startGateway({
      API_KEYS: JSON.stringify({
        keys: [
          { id: 'owner1', name: 'owner', hash: hash('secret'), models: [CLASSIFIER] },
          { id: 'other1', name: 'other', hash: hash('secret2'), models: [EMBEDDER] },
        ],
      }),
    });
    system.startWorker({ model: CLASSIFIER });
    await system.waitForWorkers(CLASSIFIER);
    owner.baseURL = other.baseURL = `${system.url}/v1`;
  });
  after(() => system.stop());

  it("one key never sees another's files or batches; a batch's lines run as its owner", async () => {
    const line = (i: number) => classifierLine(i, 'k');
    const file = await owner.files.create({ file: await jsonl([line(0), line(1)]), purpose: 'batch' });
    await assert.rejects(other.files.retrieve(file.id), (err: any) => err.status === 404);
    await assert.rejects(other.files.content(file.id), (err: any) => err.status === 404);
    assert.equal((await other.files.list()).data.length, 0);
    await assert.rejects(
      other.batches.create({ input_file_id: file.id, endpoint: '/v1/embeddings', completion_window: '24h' }),
      (err: any) => err.status === 404,
    );
    const batch = await owner.batches.create({
      input_file_id: file.id,
      endpoint: `/models/${CLASSIFIER}` as '/v1/embeddings',
      completion_window: '24h',
    });
    await assert.rejects(other.batches.retrieve(batch.id), (err: any) => err.status === 404);
    assert.equal((await other.batches.list()).data.length, 0);
    const done = await until(owner, batch.id, ended);
    assert.deepEqual(done.request_counts, { total: 2, completed: 2, failed: 0 });

    // The other key may not call the classifier: its batch's lines are refused as its requests are.
    const theirs = await other.files.create({ file: await jsonl([line(2)]), purpose: 'batch' });
    const refused = await other.batches.create({
      input_file_id: theirs.id,
      endpoint: `/models/${CLASSIFIER}` as '/v1/embeddings',
      completion_window: '24h',
    });
    const failed = await until(other, refused.id, ended);
    assert.deepEqual(failed.request_counts, { total: 1, completed: 0, failed: 1 });
    const [error] = await content(other, failed.error_file_id);
    assert.equal(error.response.status_code, 403);

    await assert.rejects(
      new OpenAI({ baseURL: `${system.url}/v1`, apiKey: 'tsk_owner1_wrong', maxRetries: 0 }).files.list(),
      (err: any) => err.status === 401,
    );
  });
});
