/**
 * Issue 10: the official Hugging Face JS client (@huggingface/inference), pointed at /models/<id>,
 * gets correct answers for every task, unchanged; and a model whose worker is still loading is
 * answered 503 "currently loading" with estimated_time (never 404), waited for with x-wait-for-model.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InferenceClient } from '@huggingface/inference';
import { Redis } from 'ioredis';
import { keys } from '@tserve/queue';
import { TestSystem, uniquePrefix, waitFor, REDIS_URL } from './helpers/system.ts';
import { CLASSIFIER, EMBEDDER, FILL_MASK as FILL, NER, NLI, QA, SLOW_CLASSIFIER as SLOW } from './helpers/replicas.ts';

describe('the official Hugging Face JS client', () => {
  const system = new TestSystem(uniquePrefix('clients'));
  const client = (model: string) => new InferenceClient().endpoint(`${system.url}/models/${model}`);

  before(async () => {
    await system.startGateway();
    for (const model of [CLASSIFIER, NER, FILL, EMBEDDER, QA, NLI]) system.startWorker({ model });
    for (const model of [CLASSIFIER, NER, FILL, EMBEDDER, QA, NLI]) await system.waitForWorkers(model);
  });
  after(() => system.stop());

  it('textClassification: the labels of the text, as the server computes them', async () => {
    const answer = await client(CLASSIFIER).textClassification({
      inputs: 'This restaurant is awesome',
      parameters: { top_k: 2 },
    });
    const raw = (await system.infer(CLASSIFIER, 'This restaurant is awesome', { top_k: 2 })).body;
    assert.deepEqual(answer, raw[0]);
    assert.deepEqual(answer.map((a) => a.label).sort(), ['NEGATIVE', 'POSITIVE']);
  });

  it('tokenClassification: grouped entities with offsets into the input', async () => {
    const text = 'Zoë Müller lives in Zürich';
    const answer = await client(NER).tokenClassification({ inputs: text });
    assert.ok(answer.length > 0);
    for (const entity of answer) {
      assert.equal(typeof entity.entity_group, 'string');
      assert.equal(Array.from(text).slice(entity.start, entity.end).join(''), entity.word, JSON.stringify(entity));
    }
  });

  it('fillMask: the top tokens for the mask', async () => {
    const answer = await client(FILL).fillMask({ inputs: 'Paris is the [MASK] of France.' });
    assert.equal(answer.length, 5);
    for (const a of answer)
      assert.ok(typeof a.token_str === 'string' && a.sequence.startsWith('paris is the '), JSON.stringify(a));
  });

  it('featureExtraction: one normalised embedding', async () => {
    const answer = (await client(EMBEDDER).featureExtraction({ inputs: 'This restaurant is awesome' })) as number[];
    assert.equal(answer.length, 384);
    assert.ok(Math.abs(Math.hypot(...answer) - 1) < 1e-5);
  });

  it('questionAnswering: the answer with its offsets into the context', async () => {
    const inputs = { question: 'Where do I live?', context: 'My name is Wolfgang and I live in Berlin' };
    const answer = await client(QA).questionAnswering({ inputs });
    assert.deepEqual(answer, (await system.infer(QA, inputs)).body);
    assert.equal(inputs.context.slice(answer.start, answer.end), answer.answer);
  });

  it('zeroShotClassification: a score per candidate label, best first', async () => {
    const parameters = { candidate_labels: ['urgent', 'not urgent', 'phone'] };
    const answer = await client(NLI).zeroShotClassification({ inputs: 'My phone broke, help!', parameters });
    const raw = (await system.infer(NLI, 'My phone broke, help!', parameters)).body;
    assert.deepEqual(
      answer,
      raw.labels.map((label: string, i: number) => ({ label, score: raw.scores[i] })),
    );
    assert.ok(Math.abs(answer.reduce((s, a) => s + a.score, 0) - 1) < 1e-6, 'single-label scores sum to 1');
  });

  it('sentenceSimilarity: one cosine per sentence, from the embedding model', async () => {
    const answer = await client(EMBEDDER).sentenceSimilarity({
      inputs: {
        source_sentence: 'That is a happy person',
        sentences: ['That is a happy person', 'Today is a sunny day'],
      },
    });
    assert.equal(answer.length, 2);
    assert.ok(Math.abs(answer[0] - 1) < 1e-6 && answer[1] < answer[0], JSON.stringify(answer));
  });
});

describe('a model still loading', () => {
  // A long heartbeat TTL: the loading worker is frozen for as long as the test needs it loading.
  const system = new TestSystem(uniquePrefix('loading'), REDIS_URL, { WORKER_TTL_MS: 120_000 });
  const redis = new Redis(REDIS_URL);
  after(async () => {
    redis.disconnect();
    await system.stop();
  });

  it('is answered 503 "currently loading" with estimated_time and Retry-After, never 404, then served', async () => {
    await system.startGateway();
    const worker = system.startWorker({ model: SLOW, env: { WORKER_ID: 'slow-loader' } });
    // Frozen mid-load, the moment it announces itself as loading.
    await waitFor(
      'the worker loading',
      async () => {
        const info = await redis.get(keys.worker(system.prefix, 'slow-loader'));
        return info !== null && JSON.parse(info).state === 'loading';
      },
      30_000,
      2,
    );
    worker.kill('SIGSTOP');
    let waiting: Promise<{ status: number; body: any }> | undefined;
    try {
      await waitFor(
        'the gateway to see it loading',
        async () => (await system.infer(SLOW, 'hello')).status === 503,
        10_000,
        50,
      );
      const refused = await system.infer(SLOW, 'hello');
      assert.equal(refused.status, 503, JSON.stringify(refused.body));
      assert.equal(refused.body.error, `Model ${SLOW} is currently loading`);
      assert.ok(
        Number.isInteger(refused.body.estimated_time) && refused.body.estimated_time > 0,
        JSON.stringify(refused.body),
      );
      assert.equal(refused.headers.get('retry-after'), String(refused.body.estimated_time));
      const ready = await fetch(`${system.url}/ready`);
      assert.equal(ready.status, 503);
      assert.match(JSON.stringify(await ready.json()), /is loading/);
      // Header options the clients send: a bad value is refused, not ignored.
      const bad = await system.post(`/models/${SLOW}`, { inputs: 'x' }, { 'x-use-cache': 'maybe' });
      assert.equal(bad.status, 400);
      assert.match(bad.body.error, /x-use-cache must be true or false/);
      waiting = system.post(
        `/models/${SLOW}`,
        { inputs: 'worth the wait' },
        { 'x-wait-for-model': 'true', 'x-use-cache': 'false' },
      );
    } finally {
      worker.kill('SIGCONT');
    }
    const waited = await waiting;
    assert.equal(waited.status, 200, JSON.stringify(waited.body));
    assert.equal((await system.infer(SLOW, 'hello')).status, 200);
    await waitFor('/ready 200', async () => (await fetch(`${system.url}/ready`)).status === 200, 10_000);
  });
});
