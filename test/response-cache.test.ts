/**
 * Issue 47: the response cache every gateway shares (RESPONSE_CACHE_TTL_S), against a real gateway,
 * real workers and the tests' Redis: hits answered without a worker, bypassed on request, keyed by
 * parameters and weights, a request served in part, every protocol route, and the memory bound.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { MODEL_DIR, REDIS_URL, TestSystem, uniquePrefix, waitFor, type Proc } from './helpers/system.ts';
import { CLASSIFIER, EMBEDDER, RERANKER } from './helpers/replicas.ts';

/** Small enough that the flood below passes it many times over, large enough for every other test's entries. */
const MAX_MB = 0.1;
const MAX_BYTES = Math.floor(MAX_MB * 2 ** 20);

describe('response cache', () => {
  const system = new TestSystem(uniquePrefix('cache'));
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const cachePrefix = `${system.prefix}:response-cache`;
  let classifier: Proc;
  let copies: string | undefined;

  /** Requests the workers answered for a model (each trip to the queue counts once), from the gateway's /metrics. */
  const computed = (model: string) => system.metric('tserve_inference_duration_seconds_count', { model });
  const classify = (inputs: unknown, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
    system.post(`/models/${CLASSIFIER}`, { inputs, ...extra }, headers);

  before(async () => {
    await system.startGateway({ RESPONSE_CACHE_TTL_S: '600', RESPONSE_CACHE_MAX_MB: String(MAX_MB) });
    classifier = system.startWorker({ model: CLASSIFIER });
    for (const model of [EMBEDDER, RERANKER]) system.startWorker({ model });
    for (const model of [CLASSIFIER, EMBEDDER, RERANKER]) await system.waitForWorkers(model);
  });
  after(async () => {
    await system.stop();
    redis.disconnect();
    if (copies) fs.rmSync(copies, { recursive: true, force: true });
  });

  it('answers a repeated request from the cache, without a worker', async () => {
    const first = await classify('a text worth keeping');
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.equal(first.headers.get('x-cache'), 'miss');
    const before = await computed(CLASSIFIER);
    const again = await classify('a text worth keeping');
    assert.equal(again.headers.get('x-cache'), 'hit');
    assert.deepEqual(again.body, first.body);
    assert.equal(again.headers.get('x-model-sha256'), first.headers.get('x-model-sha256'));
    assert.equal(await computed(CLASSIFIER), before, 'a hit is not sent to the workers');
    assert.equal(await system.metric('tserve_response_cache_hits_total', { model: CLASSIFIER }), 1);

    // Every worker of the model gone: its last workers' answers are still served, nothing else is.
    await classifier.stop('SIGKILL');
    await waitFor('the worker gone from /ready', async () => {
      const body = (await (await fetch(`${system.url}/ready`)).json()) as {
        models: Record<string, { workers: number } | undefined>;
      };
      return !body.models[CLASSIFIER]?.workers;
    });
    const alone = await classify('a text worth keeping');
    assert.equal(alone.status, 200, JSON.stringify(alone.body));
    assert.equal(alone.headers.get('x-cache'), 'hit');
    assert.deepEqual(alone.body, first.body);
    assert.equal((await classify('a text never seen')).status, 503);
    assert.equal((await classify('a text worth keeping', { options: { use_cache: false } })).status, 503);
  });

  it('misses once the model is reloaded with other weights', async () => {
    // The same model id from a copy whose fp32 weights file, which DTYPE=auto loads, is another one (the q8 file under its name).
    copies = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-cache-'));
    const from = path.join(MODEL_DIR, CLASSIFIER);
    const to = path.join(copies, CLASSIFIER);
    fs.mkdirSync(path.join(to, 'onnx'), { recursive: true });
    for (const file of fs.readdirSync(from))
      if (file !== 'onnx') fs.copyFileSync(path.join(from, file), path.join(to, file));
    fs.copyFileSync(path.join(from, 'onnx', 'model_quantized.onnx'), path.join(to, 'onnx', 'model.onnx'));
    const old = (await classify('a text worth keeping')).headers.get('x-model-sha256');

    classifier = system.startWorker({ model: CLASSIFIER, env: { MODEL_DIR: copies } });
    await system.waitForWorkers(CLASSIFIER);
    const reloaded = await classify('a text worth keeping');
    assert.equal(reloaded.status, 200, JSON.stringify(reloaded.body));
    assert.notEqual(reloaded.headers.get('x-model-sha256'), old);
    assert.equal(reloaded.headers.get('x-cache'), 'miss', 'new weights never find the old answers');
    assert.equal((await classify('a text worth keeping')).headers.get('x-cache'), 'hit');
  });

  it('computes afresh with use_cache false or x-use-cache: false', async () => {
    await classify('asked twice');
    const before = await computed(CLASSIFIER);
    const body = await classify('asked twice', { options: { use_cache: false } });
    assert.equal(body.status, 200);
    assert.equal(body.headers.get('x-cache'), 'miss');
    const header = await classify('asked twice', {}, { 'x-use-cache': 'false' });
    assert.equal(header.headers.get('x-cache'), 'miss');
    assert.equal(await computed(CLASSIFIER), before + 2);
    assert.equal((await classify('asked twice', {}, { 'x-use-cache': 'true' })).headers.get('x-cache'), 'hit');
  });

  it('misses when the parameters differ', async () => {
    const text = 'the same text, asked differently';
    assert.equal((await classify(text, { parameters: { top_k: null } })).headers.get('x-cache'), 'miss');
    assert.equal((await classify(text, { parameters: { top_k: null } })).headers.get('x-cache'), 'hit');
    const raw = await classify(text, { parameters: { top_k: null, function_to_apply: 'none' } });
    assert.equal(raw.headers.get('x-cache'), 'miss');
    const scores = await classify(text, { parameters: { top_k: null } });
    assert.notDeepEqual(raw.body, scores.body, 'logits are not probabilities');
    // Another task on the same text and model is another entry too (tokenization alone).
    assert.equal((await system.post('/tokenize', { inputs: text, model: CLASSIFIER })).headers.get('x-cache'), 'miss');
  });

  it('computes only the inputs of a request that the cache lacks', async () => {
    const [a, b, c] = ['first of several', 'second of several', 'third of several'];
    const both = await classify([a, b]);
    assert.equal(both.headers.get('x-batch-size'), '2');
    const before = await computed(CLASSIFIER);
    const part = await classify([c, a]);
    assert.equal(part.status, 200, JSON.stringify(part.body));
    assert.equal(part.headers.get('x-cache'), 'miss');
    assert.equal(part.headers.get('x-batch-size'), '1', 'only the input not cached ran');
    assert.equal(await computed(CLASSIFIER), before + 1);
    assert.deepEqual(part.body[1], both.body[0]);
    const alone = await classify(c, { options: { use_cache: false } });
    assert.deepEqual([part.body[0]], alone.body, 'the computed input is in its place');
    const all = await classify([b, c, a]);
    assert.equal(all.headers.get('x-cache'), 'hit');
    assert.deepEqual(all.body, [both.body[1], part.body[0], both.body[0]]);

    // A warning of the computed part names the input by its place in the whole request, and such an answer is not kept.
    const long = 'word '.repeat(700);
    const warned = await classify([a, long]);
    assert.equal(warned.status, 200, JSON.stringify(warned.body));
    assert.match(warned.headers.get('x-warnings') ?? '', /inputs\[1\] was truncated/);
    assert.equal((await classify(long)).headers.get('x-cache'), 'miss');
  });

  it('serves embeddings, rerank and every protocol route', async () => {
    const routes: Array<[string, () => Promise<{ status: number; body: any; headers: Headers }>]> = [
      [
        '/models (embeddings)',
        () => system.post(`/models/${EMBEDDER}`, { inputs: ['an embedded text', 'another one'] }),
      ],
      [
        '/v1/embeddings',
        () => system.post('/v1/embeddings', { model: EMBEDDER, input: ['an embedded text', 'a third one'] }),
      ],
      ['/embed', () => system.post('/embed', { model: EMBEDDER, inputs: 'an embedded text' })],
      [
        '/rerank',
        () => system.post('/rerank', { model: RERANKER, query: 'which one', texts: ['this one', 'that one'] }),
      ],
      ['/predict', () => system.post('/predict', { model: CLASSIFIER, inputs: 'a prediction' })],
      [
        '/v2/models/…/infer',
        () =>
          system.post(`/v2/models/${CLASSIFIER}/infer`, {
            inputs: [{ name: 'text', shape: [1, 1], datatype: 'BYTES', data: [['kserve text']] }],
          }),
      ],
    ];
    for (const [route, send] of routes) {
      const first = await send();
      assert.equal(first.status, 200, `${route}: ${JSON.stringify(first.body)}`);
      const again = await send();
      assert.equal(again.headers.get('x-cache'), 'hit', route);
      assert.deepEqual(again.body, first.body, route);
    }
    // An answer from the cache keeps the tokens the model read for it.
    const usage = await system.post('/v1/embeddings', { model: EMBEDDER, input: 'an embedded text' });
    const fresh = await system.post(
      '/v1/embeddings',
      { model: EMBEDDER, input: 'an embedded text' },
      { 'x-use-cache': 'false' },
    );
    assert.equal(usage.headers.get('x-cache'), 'hit');
    assert.ok(fresh.body.usage.prompt_tokens > 0);
    assert.deepEqual(usage.body.usage, fresh.body.usage);
  });

  it('holds its memory bound under a flood of distinct inputs, evicting its oldest entries', async () => {
    const flood = Array.from({ length: 20 }, (_, r) => Array.from({ length: 32 }, (_, i) => `flood ${r} input ${i}`));
    for (const inputs of flood) assert.equal((await classify(inputs)).status, 200);

    const counted = Number(await redis.get(`${cachePrefix}:bytes`));
    assert.ok(counted > MAX_BYTES / 2 && counted <= MAX_BYTES, `${counted} bytes counted, bound ${MAX_BYTES}`);
    // In Redis's own measure too: every key of the cache, entries and index.
    let held = 0;
    let entries = 0;
    let cursor = '0';
    do {
      const [next, found] = await redis.scan(cursor, 'MATCH', `${cachePrefix}:*`, 'COUNT', 1000);
      cursor = next;
      for (const key of found) {
        held += (await redis.memory('USAGE', key, 'SAMPLES', 0)) ?? 0;
        if (key.includes(':entry:')) entries++;
      }
    } while (cursor !== '0');
    assert.ok(held <= MAX_BYTES, `Redis holds ${held} bytes of the cache, bound ${MAX_BYTES}`);
    assert.equal(await redis.zcard(`${cachePrefix}:index`), entries, 'the index names every entry it counts');
    assert.ok(entries < 20 * 32, `${entries} entries kept`);
    assert.equal((await classify(flood[19])).headers.get('x-cache'), 'hit', 'the newest entries stay');
    assert.equal((await classify(flood[0][0])).headers.get('x-cache'), 'miss', 'the oldest are evicted');
    assert.ok((await system.metric('tserve_response_cache_bytes')) <= MAX_BYTES);
    assert.ok((await system.metric('tserve_response_cache_stored_bytes_total')) > MAX_BYTES);
    assert.ok((await system.metric('tserve_response_cache_misses_total', { model: CLASSIFIER })) >= 20 * 32);
  });
});
