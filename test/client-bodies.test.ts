/**
 * Issue 83: the clients people already run, at the sizes they send, with the bodies they send. The
 * official `openai` client with 2,048 inputs and a base URL without /v1; LangChain's
 * OpenAIEmbeddings on 3,000 texts at its default batch size; tiktoken's token ids, as LangChain's
 * Python OpenAIEmbeddings sends them; the exact bodies of Elasticsearch's, Weaviate's, Milvus's and
 * Infinity's integrations. Unknown fields are left out and named, never refused, and never change
 * an answer; every vector and score equals the same input's answer sent alone.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { OpenAIEmbeddings } from '@langchain/openai';
import { Tiktoken } from 'js-tiktoken/lite';
import cl100k from 'js-tiktoken/ranks/cl100k_base';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { queueNameFor } from '@tserve/queue';
import { TestSystem, uniquePrefix, waitFor, REDIS_URL } from './helpers/system.ts';
import { DEFAULT_CLASSIFIER, EMBEDDER, RERANKER } from './helpers/replicas.ts';

/** `n` distinct texts of a few words, as a client's documents would be. */
const textsOf = (n: number, topic = 'notes') =>
  Array.from({ length: n }, (_, i) => `${topic} ${i}: the ${['red', 'quiet', 'old', 'fast'][i % 4]} item ${i % 97}`);

function assertClose(actual: number[], expected: number[], tolerance: number, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  const worst = Math.max(...actual.map((v, i) => Math.abs(v - expected[i])));
  assert.ok(worst <= tolerance, `${what}: differs by ${worst}`);
}

describe('real clients at their real sizes, and the bodies they send', () => {
  const system = new TestSystem(uniquePrefix('client-bodies'));
  /** Each text's vector from TEI's /embed, sent alone. */
  const alone = async (text: string): Promise<number[]> => {
    const res = await system.post('/embed', { inputs: text });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return res.body[0];
  };
  /** Every `step`-th of `texts`' vectors, and the last, equal each text's vector sent alone. */
  const sampledAlone = async (texts: string[], vectors: number[][], step: number) => {
    assert.equal(vectors.length, texts.length);
    for (let i = 0; i < texts.length; i += step) assertClose(vectors[i], await alone(texts[i]), 1e-6, `input ${i}`);
    const last = texts.length - 1;
    assertClose(vectors[last], await alone(texts[last]), 1e-6, `input ${last}`);
  };

  before(async () => {
    await system.startGateway();
    for (const model of [EMBEDDER, RERANKER, DEFAULT_CLASSIFIER]) system.startWorker({ model });
    for (const model of [EMBEDDER, RERANKER, DEFAULT_CLASSIFIER]) await system.waitForWorkers(model);
  });
  after(() => system.stop());

  it("the openai client's 2,048 inputs in one request: one answer, in order, each as if sent alone", async () => {
    const texts = textsOf(2048);
    const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const answer = await client.embeddings.create({ model: EMBEDDER, input: texts, encoding_format: 'float' });
    assert.equal(answer.data.length, 2048);
    answer.data.forEach((d, i) => assert.equal(d.index, i));
    assert.ok(answer.usage.prompt_tokens > 2048);
    await sampledAlone(
      texts,
      answer.data.map((d) => d.embedding),
      157,
    );
  });

  it('the openai client given the bare address (no /v1): /embeddings and /models answer as /v1 does', async () => {
    const client = new OpenAI({ baseURL: system.url, apiKey: 'unused', maxRetries: 0 });
    const answer = await client.embeddings.create({ model: EMBEDDER, input: ['a tree', 'a forest'] });
    assert.deepEqual(
      answer.data.map((d) => d.index),
      [0, 1],
    );
    assertClose(answer.data[1].embedding, await alone('a forest'), 1e-6, '/embeddings');
    const listed = await client.models.list();
    assert.deepEqual(listed.data.map((m) => m.id).sort(), [DEFAULT_CLASSIFIER, EMBEDDER, RERANKER].sort());
    assert.equal((await client.models.retrieve(EMBEDDER)).id, EMBEDDER);
    await assert.rejects(client.embeddings.create({ model: 'no/such-model', input: 'x' }), (err: any) => {
      assert.equal(err.status, 404);
      assert.equal(err.code, 'model_not_found', 'in OpenAI’s error shape without /v1 too');
      return true;
    });
  });

  it("LangChain's OpenAIEmbeddings embeds 3,000 texts at its default batch size", async () => {
    const texts = textsOf(3000, 'chunk');
    const embeddings = new OpenAIEmbeddings({
      model: EMBEDDER,
      configuration: { baseURL: `${system.url}/v1` },
      apiKey: 'unused',
      maxRetries: 0,
    });
    assert.equal(embeddings.batchSize, 512, "LangChain's default: 512 texts a request");
    const vectors = await embeddings.embedDocuments(texts);
    await sampledAlone(texts, vectors, 331);
  });

  it("token ids, as LangChain's Python OpenAIEmbeddings sends them, are read as the text tiktoken encoded", async () => {
    const encoding = new Tiktoken(cl100k);
    const texts = ['Zoë lives in Zürich', 'a tree falls in the forest', '日本語のテキスト'];
    const res = await system.post('/v1/embeddings', {
      model: EMBEDDER,
      input: texts.map((t) => encoding.encode(t)),
      encoding_format: 'base64',
    });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    for (const [i, text] of texts.entries()) {
      const bytes = Buffer.from(res.body.data[i].embedding, 'base64');
      const vector = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4));
      assertClose(vector, await alone(text), 1e-6, text);
    }
    const one = await system.post('/embeddings', { model: EMBEDDER, input: encoding.encode(texts[1]) });
    assertClose(one.body.data[0].embedding, await alone(texts[1]), 1e-6, 'one list of ids');
  });

  it("Elasticsearch's rerank body on a TEI URL: top_n of TEI's list, scores as /rerank's", async () => {
    const texts = ['Berlin has 3.5 million people.', 'Paris is in France.', 'Berlin is in Germany.'];
    const body = { query: 'How many people live in Berlin?', texts, return_text: false, top_n: 2 };
    const res = await system.post('/rerank', body);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const full = await system.post('/rerank', { query: body.query, texts });
    assert.deepEqual(res.body, full.body.slice(0, 2));
    assert.deepEqual(Object.keys(res.body[0]).sort(), ['index', 'score']);
    assert.equal(res.headers.get('x-ignored-fields'), null, 'every field known');
  });

  it("Weaviate's text2vec-huggingface body: its options honoured or left out, the vectors as /embed's", async () => {
    const texts = ['a quiet street', 'the noisy market'];
    const body = { inputs: texts, options: { wait_for_model: true, use_gpu: false, use_cache: true } };
    const res = await system.post(`/models/${EMBEDDER}`, body);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.headers.get('x-ignored-fields'), 'options.use_gpu');
    for (const [i, text] of texts.entries()) assertClose(res.body[i], await alone(text), 1e-6, text);
  });

  it("Milvus's vllm and Infinity's rerank body: documents, answered in the Jina/Cohere shape", async () => {
    const documents = ['Berlin has 3.5 million people.', 'Paris is in France.', 'Berlin is in Germany.'];
    const query = 'How many people live in Berlin?';
    const tei = await system.post('/rerank', { query, texts: documents });
    for (const body of [
      { query, documents, top_n: 2, truncate_prompt_tokens: -1 },
      { query, documents, top_n: 2, return_documents: true, raw_scores: false, model: 'default/not-specified' },
      { query, documents: documents.map((text, i) => ({ text, id: i })), top_n: 2, return_documents: true },
    ]) {
      const res = await system.post('/rerank', body);
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.object, 'rerank');
      assert.equal(res.body.model, RERANKER);
      assert.ok(res.body.usage.total_tokens > 0);
      assert.deepEqual(
        res.body.results.map((r: any) => [r.index, r.relevance_score]),
        tei.body.slice(0, 2).map((r: any) => [r.index, r.score]),
      );
      for (const r of res.body.results) {
        const sent = body.documents[r.index];
        if (body.return_documents) assert.deepEqual(r.document, typeof sent === 'string' ? { text: sent } : sent);
        else assert.equal(r.document, undefined);
      }
    }
    const ignored = await system.post('/rerank', { query, documents, top_n: 1, truncate_prompt_tokens: -1 });
    assert.equal(ignored.headers.get('x-ignored-fields'), 'truncate_prompt_tokens');
    const both = await system.post('/rerank', { query, documents, texts: documents });
    assert.equal(both.status, 422);
    assert.match(both.body.error, /either texts \(TEI\) or documents/);
  });

  it("Infinity's /classify: every label's score for each text, as the Inference API's", async () => {
    const input = ['I love this place', 'terrible service'];
    const res = await system.post('/classify', { input, model: DEFAULT_CLASSIFIER, raw_scores: false });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.object, 'classify');
    assert.equal(res.body.model, DEFAULT_CLASSIFIER);
    const reference = await system.infer(DEFAULT_CLASSIFIER, input, { top_k: null });
    assert.deepEqual(res.body.data, reference.body);
    const raw = await system.post('/classify', { input: input[0], raw_scores: true, model: DEFAULT_CLASSIFIER });
    const logits = await system.infer(DEFAULT_CLASSIFIER, input[0], { top_k: null, function_to_apply: 'none' });
    assert.deepEqual(raw.body.data[0], logits.body[0]);
    const wrong = await system.post('/classify', { input, model: EMBEDDER });
    assert.equal(wrong.status, 400);
    assert.match(wrong.body.error.message, /not a sequence classifier/);
    assert.equal(wrong.body.error.code, 400, "Infinity's error shape");
  });

  describe('an unknown field is left out and named on every protocol, and never changes the answer', () => {
    const cases: Array<[string, string, Record<string, unknown>, Record<string, unknown>, string]> = [
      [
        'Inference API',
        `/models/${EMBEDDER}`,
        { inputs: 'one text' },
        { options: { use_gpu: true } },
        'options.use_gpu',
      ],
      [
        'Inference API parameters',
        `/models/${EMBEDDER}`,
        { inputs: 'one text', parameters: { normalize: true } },
        { parameters: { normalize: true, temperature: 0 } },
        'parameters.temperature',
      ],
      [
        'OpenAI',
        '/v1/embeddings',
        { model: EMBEDDER, input: ['one text'] },
        { extra: { a: 1 }, input_type: 'query' },
        'extra, input_type',
      ],
      ['TEI', '/embed', { inputs: 'one text' }, { normalise: false }, 'normalise'],
      ['TEI rerank', '/rerank', { query: 'q', texts: ['a', 'b'] }, { rank_fields: ['t'] }, 'rank_fields'],
      [
        'Cohere',
        '/v2/rerank',
        { model: RERANKER, query: 'q', documents: ['a', 'b'] },
        { rank_fields: ['t'] },
        'rank_fields',
      ],
      ['Infinity', '/classify', { input: ['one text'], model: DEFAULT_CLASSIFIER }, { modality: 'text' }, 'modality'],
      [
        'KServe v2',
        `/v2/models/${EMBEDDER}/infer`,
        { inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['one text'] }] },
        { request_kind: 'x' },
        'request_kind',
      ],
    ];
    for (const [protocol, path, body, extra, named] of cases) {
      it(protocol, async () => {
        const plain = await system.post(path, body);
        assert.equal(plain.status, 200, JSON.stringify(plain.body));
        assert.equal(plain.headers.get('x-ignored-fields'), null);
        const merged = { ...body, ...extra };
        const lenient = await system.post(path, merged);
        assert.equal(lenient.status, 200, JSON.stringify(lenient.body));
        assert.equal(lenient.headers.get('x-ignored-fields'), named);
        const strip = (b: any) =>
          b && typeof b === 'object' && !Array.isArray(b) ? { ...b, id: undefined, created: undefined } : b;
        assert.deepEqual(strip(lenient.body), strip(plain.body));
      });
    }

    it('a known field with a bad value is still refused, in the protocol’s shape', async () => {
      const refused: Array<[string, unknown, number]> = [
        [`/models/${EMBEDDER}`, { inputs: 'x', options: { use_cache: 'yes' }, foo: 1 }, 400],
        ['/v1/embeddings', { model: EMBEDDER, input: 'x', dimensions: 'small', foo: 1 }, 400],
        ['/embed', { inputs: 'x', truncate: 'yes', foo: 1 }, 422],
        ['/v2/rerank', { model: RERANKER, query: 'q', documents: ['a'], top_n: 0, foo: 1 }, 400],
        ['/rerank', { query: 'q', documents: ['a'], top_n: 'two' }, 422],
      ];
      for (const [path, body, status] of refused) {
        const res = await system.post(path, body);
        assert.equal(res.status, status, `${path}: ${JSON.stringify(res.body)}`);
        assert.doesNotMatch(JSON.stringify(res.body), /unknown field|foo/, 'the error is about the known field');
      }
    });

    it('a body of many unknown fields names the first twenty in the header, and all is answered', async () => {
      const extra = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`f${i}`, i]));
      const res = await system.post('/embed', { inputs: 'x', ...extra });
      assert.equal(res.status, 200);
      const named = res.headers.get('x-ignored-fields') ?? '';
      assert.match(named, /^f0, f1, .*f19, \(30 more\)$/);
    });
  });

  it("a large request's answer holds no more numbers than one request's (MAX_ANSWER_VALUES): each piece its share", async () => {
    // 2,048 texts' token vectors: about 15 million numbers, where one answer may hold 2 million.
    const many = await system.post('/embed_all', { inputs: textsOf(2048) });
    assert.equal(many.status, 422, JSON.stringify(many.body).slice(0, 300));
    assert.match(
      many.body.error,
      /one of its 64 pieces would hold \d+ numbers, more than its share \(31250\) of the 2000000 one answer may hold \(MAX_ANSWER_VALUES\)/,
    );
    const few = await system.post('/embed_all', { inputs: textsOf(64) });
    assert.equal(few.status, 200, 'two pieces, each within its share');
    assert.equal(few.body.length, 64);
  });

  it('over MAX_INPUTS_PER_REQUEST (2,048 by default) is a 413 naming the setting, in each shape', async () => {
    const texts = Array(2049).fill('x');
    const openai = await system.post('/v1/embeddings', { model: EMBEDDER, input: texts });
    assert.equal(openai.status, 413);
    assert.match(openai.body.error.message, /2049 inputs in one request; at most 2048 .*MAX_INPUTS_PER_REQUEST/);
    const tei = await system.post('/embed', { inputs: texts });
    assert.equal(tei.status, 422, "TEI's status for too large a batch");
    assert.match(tei.body.error, /MAX_INPUTS_PER_REQUEST/);
  });
});

describe('a 2,048-input request over several jobs, one worker killed mid-way', () => {
  it('is answered whole and in order, nothing lost and nothing twice, each vector as if sent alone', async (t) => {
    const system = new TestSystem(uniquePrefix('pieces-kill'));
    t.after(() => system.stop());
    await system.startGateway();
    const env = { JOB_LOCK_MS: 1500, STALLED_INTERVAL_MS: 500 };
    const victim = system.startWorker({ model: EMBEDDER, env: { ...env, WORKER_ID: 'victim' } });
    system.startWorker({ model: EMBEDDER, env });
    await system.waitForWorkers(EMBEDDER, 2);

    const texts = textsOf(2048, 'row');
    const redis = new Redis(REDIS_URL);
    const queue = new Queue(queueNameFor(EMBEDDER), { connection: redis, prefix: system.prefix });
    t.after(async () => {
      await queue.close();
      redis.disconnect();
    });
    const answer = system.post('/v1/embeddings', { model: EMBEDDER, input: texts });
    // Frozen while it holds a piece, so that piece can never be answered by it: then killed.
    let held: string[] = [];
    await waitFor(
      'the victim to hold a piece',
      async () => {
        victim.kill('SIGSTOP');
        held = (await queue.getActive()).filter((j) => j.processedBy === 'victim').map((j) => j.id!);
        if (held.length === 0) victim.kill('SIGCONT');
        return held.length > 0;
      },
      30_000,
      1,
    );
    victim.kill('SIGKILL');
    const res = await answer;
    assert.equal(res.status, 200, JSON.stringify(res.body).slice(0, 500));
    assert.ok(
      held.every((id) => /-piece\d+$/.test(id)),
      `the victim held pieces: ${held.join(', ')}`,
    );
    const data = res.body.data as Array<{ index: number; embedding: number[] }>;
    assert.deepEqual(
      data.map((d) => d.index),
      texts.map((_, i) => i),
      'every input answered once, in order',
    );
    for (let i = 0; i < texts.length; i += 211) {
      const one = await system.post('/embed', { inputs: texts[i] });
      assertClose(data[i].embedding, one.body[0], 1e-6, `input ${i}`);
    }
    // Each piece the victim held ran again on the other worker, once its lock expired.
    for (const id of held) {
      const job = await queue.getJob(id);
      assert.ok(job?.finishedOn && job.processedBy !== 'victim', `piece ${id} recovered elsewhere`);
    }
  });
});
