/**
 * Issue 16: the protocols users already have clients for, over the same queue and workers:
 * OpenAI embeddings (with the official `openai` client), TEI's routes, Cohere's rerank (with the
 * official `cohere-ai` client), and KServe v2. Each route
 * answers bad input with a 4xx in its protocol's own error shape.
 */
import { after, before, describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import OpenAI from 'openai';
import { CohereClient, CohereClientV2 } from 'cohere-ai';
import { AutoModelForSequenceClassification, AutoTokenizer, env } from '@huggingface/transformers';
import { MODEL_DIR, TestSystem, reference, uniquePrefix } from './helpers/system.ts';
import { CLASSIFIER, EMBEDDER, RERANKER } from './helpers/replicas.ts';
import { binaryRequest, bytesTensor } from './helpers/triton.ts';

const REF = reference() as Record<string, any>;

/** What the Hugging Face tokenizers library, which TEI decodes with, makes of each sequence of ids. */
function decodedByTokenizers(model: string, sequences: number[][], skipSpecialTokens: boolean): string[] {
  const script = [
    'import json, sys',
    'from tokenizers import Tokenizer',
    'tokenizer = Tokenizer.from_file(sys.argv[1])',
    'print(json.dumps([tokenizer.decode(ids, skip_special_tokens=sys.argv[3] == "1") for ids in json.loads(sys.argv[2])]))',
  ].join('\n');
  const file = path.join(MODEL_DIR, model, 'tokenizer.json');
  const out = execFileSync('python3', ['-c', script, file, JSON.stringify(sequences), skipSpecialTokens ? '1' : '0'], {
    encoding: 'utf8',
  });
  return JSON.parse(out) as string[];
}
const TOL = 1e-4;

env.allowRemoteModels = false;
env.localModelPath = `${MODEL_DIR}/`;

describe('protocols', () => {
  const system = new TestSystem(uniquePrefix('protocols'));
  const get = async (path: string) => {
    const res = await fetch(`${system.url}${path}`);
    return { status: res.status, body: (await res.json()) as any };
  };

  /** Answered model calls for a model, from the gateway's /metrics. */
  const modelCalls = (model: string) => system.metric('tserve_inference_duration_seconds_count', { model });

  before(async () => {
    await system.startGateway();
    // q8, the file the in-process references below load: the protocols are under test here, not the
    // dtype (batch-invariance.test.ts holds DTYPE=auto's int8-row to its own references).
    for (const model of [EMBEDDER, RERANKER, CLASSIFIER]) system.startWorker({ model, env: { DTYPE: 'q8' } });
    for (const model of [EMBEDDER, RERANKER, CLASSIFIER]) await system.waitForWorkers(model);
  });
  after(() => system.stop());

  describe('OpenAI embeddings', () => {
    const client = () => new OpenAI({ baseURL: `${system.url}/v1`, apiKey: 'unused', maxRetries: 0 });

    it('the openai client gets the same embeddings as /models/<id>, float and base64, with real token counts', async () => {
      const text = 'This restaurant is awesome';
      const own = (await system.infer(EMBEDDER, text)).body as number[];
      const tokenizer = await AutoTokenizer.from_pretrained(EMBEDDER);
      const tokens = tokenizer.encode(text).length;
      for (const encoding_format of ['float', 'base64', undefined] as const) {
        const answer = await client().embeddings.create({
          model: EMBEDDER,
          input: text,
          ...(encoding_format ? { encoding_format } : {}),
        });
        assert.equal(answer.object, 'list');
        assert.equal(answer.model, EMBEDDER);
        assert.deepEqual(answer.usage, { prompt_tokens: tokens, total_tokens: tokens });
        let embedding = answer.data[0].embedding as unknown;
        if (typeof embedding === 'string') {
          const bytes = Buffer.from(embedding, 'base64');
          embedding = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4));
        }
        const vector = embedding as number[];
        assert.equal(vector.length, own.length);
        // base64 carries float32: equal to float precision.
        vector.forEach((v, i) => assert.ok(Math.abs(v - own[i]) < 1e-6, `${encoding_format} dim ${i}`));
      }
    });

    it('a list of inputs keeps its order; dimensions shortens and renormalises; /v1/models lists the served models', async () => {
      const inputs = ['first text', 'a second, longer text', 'third'];
      const answer = await client().embeddings.create({ model: EMBEDDER, input: inputs, encoding_format: 'float' });
      assert.deepEqual(
        answer.data.map((d) => d.index),
        [0, 1, 2],
      );
      const alone = (await system.infer(EMBEDDER, inputs[1])).body as number[];
      const cosine = answer.data[1].embedding.reduce((s, v, i) => s + v * alone[i], 0);
      // Batched with its neighbours a q8 model's output shifts a little.
      assert.ok(cosine > 0.95, `inputs[1] is its own text's embedding (${cosine})`);
      const short = await client().embeddings.create({
        model: EMBEDDER,
        input: 'x',
        dimensions: 64,
        encoding_format: 'float',
      });
      assert.equal(short.data[0].embedding.length, 64);
      assert.ok(Math.abs(Math.hypot(...short.data[0].embedding) - 1) < 1e-6);
      const models = await client().models.list();
      assert.deepEqual(models.data.map((m) => m.id).sort(), [EMBEDDER, RERANKER, CLASSIFIER].sort());
    });

    it('errors come as {error: {message, type, code}} with the right statuses, and the client raises them', async () => {
      await assert.rejects(
        client().embeddings.create({ model: 'no/such-model', input: 'x' }),
        (err: any) => err.status === 404 && err.code === 'model_not_found',
      );
      const cases: Array<[unknown, number, RegExp]> = [
        [{ model: EMBEDDER }, 400, /input is required/],
        [{ model: EMBEDDER, input: [] }, 400, /empty list/],
        // Token ids are tiktoken's (cl100k_base): each must be one of its ids.
        [{ model: EMBEDDER, input: [[9906, -1]] }, 400, /token ids must not be negative/],
        [{ model: EMBEDDER, input: [[9906, 100_300]] }, 400, /token id 100300 is not in cl100k_base/],
        // int8, uint8, binary and ubinary are compact types here (docs/api/openai.md); int4 is nothing.
        [{ model: EMBEDDER, input: 'x', encoding_format: 'int4' }, 400, /encoding_format/],
        [{ model: EMBEDDER, input: 'x', dimensions: 5000 }, 400, /dimensions must be at most 384/],
        [{ model: CLASSIFIER, input: 'x' }, 400, /not an embedding model/],
        [{ input: 'x' }, 400, /model is required/],
      ];
      for (const [body, status, message] of cases) {
        const res = await system.post('/v1/embeddings', body);
        assert.equal(res.status, status, JSON.stringify(res.body));
        assert.equal(typeof res.body.error, 'object', JSON.stringify(res.body));
        assert.match(res.body.error.message, message);
        assert.equal(res.body.error.type, 'invalid_request_error');
      }
      const malformed = await system.post('/v1/embeddings', '{"model":');
      assert.equal(malformed.status, 400);
      assert.match(malformed.body.error.message, /malformed JSON/);
    });
  });

  describe('TEI', () => {
    it('/embed answers a list of embeddings equal to /models/<id>; normalize and truncate are honoured', async () => {
      const own = (await system.infer(EMBEDDER, 'hello world')).body as number[];
      const res = await system.post('/embed', { inputs: 'hello world' });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.length, 1);
      res.body[0].forEach((v: number, i: number) => assert.ok(Math.abs(v - own[i]) < 1e-6));
      const raw = await system.post('/embed', { inputs: ['hello world'], normalize: false });
      assert.ok(Math.abs(Math.hypot(...raw.body[0]) - 1) > 1e-3, 'not normalised');
      const long = 'word '.repeat(600);
      const refused = await system.post('/embed', { inputs: long });
      assert.equal(refused.status, 422, JSON.stringify(refused.body));
      assert.equal(refused.body.error_type, 'Validation');
      assert.match(refused.body.error, /accepts at most 512/);
      const cut = await system.post('/embed', { inputs: long, truncate: true, truncation_direction: 'Left' });
      assert.equal(cut.status, 200);
    });

    it("/embed_all gives each token's vector: as many as /tokenize's tokens, and /embed's vector when pooled", async () => {
      const text = 'The soup was cold but the waiter was friendly.';
      // Alone: this worker is q8, whose answers shift with their batch mates.
      const res = await system.post('/embed_all', { inputs: text });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      const [tokens] = res.body as number[][][];
      const ids = (await system.post('/tokenize', { inputs: text, model: EMBEDDER })).body[0];
      assert.equal(tokens.length, ids.length);
      assert.ok(tokens.every((v) => v.length === 384));
      const pooled = tokens[0].map((_x, j) => tokens.reduce((sum, v) => sum + v[j], 0) / tokens.length);
      const norm = Math.hypot(...pooled);
      const [embedded] = (await system.post('/embed', { inputs: text })).body as number[][];
      const largest = Math.max(...embedded.map((x, j) => Math.abs(x - pooled[j] / norm)));
      assert.ok(largest < 1e-5, `differs by ${largest}`);
      const [fine, short] = (await system.post('/embed_all', { inputs: [text, 'Fine.'] })).body as number[][][];
      assert.equal(fine.length, tokens.length);
      assert.equal(short.length, 4); // [CLS] fine . [SEP]
    });

    it('truncation_direction Left keeps the last tokens on /embed, /predict and /rerank, of texts and pairs alike', async () => {
      // Two texts that differ only in their first words, both past the model's length: cut on the
      // left they become the same sequence, cut on the right they stay different.
      const tail = 'word '.repeat(600);
      const texts = [`alpha beta gamma ${tail}`, `delta epsilon zeta ${tail}`];
      const both = async (send: (text: string, direction: string) => Promise<unknown>, direction: string) =>
        Promise.all(texts.map((text) => send(text, direction)));
      const routes: Array<[string, (text: string, direction: string) => Promise<unknown>]> = [
        [
          '/embed',
          async (text, d) =>
            (await system.post('/embed', { inputs: text, truncate: true, truncation_direction: d })).body,
        ],
        [
          '/predict',
          async (text, d) =>
            (
              await system.post('/predict', {
                inputs: text,
                truncate: true,
                truncation_direction: d,
                model: CLASSIFIER,
              })
            ).body,
        ],
        [
          '/predict (pair)',
          async (text, d) =>
            (
              await system.post('/predict', {
                inputs: ['a query', text],
                truncate: true,
                truncation_direction: d,
                model: RERANKER,
              })
            ).body,
        ],
        [
          '/rerank',
          async (text, d) =>
            (
              (
                await system.post('/rerank', {
                  query: 'a query',
                  texts: [text],
                  truncate: true,
                  truncation_direction: d,
                })
              ).body as any[]
            )[0].score,
        ],
      ];
      for (const [route, send] of routes) {
        const [left1, left2] = await both(send, 'Left');
        assert.deepEqual(left1, left2, `${route}: a left cut keeps only the shared tail`);
        const [right1, right2] = await both(send, 'Right');
        assert.notDeepEqual(right1, right2, `${route}: a right cut keeps the different heads`);
      }
    });

    it('/predict scores texts and pairs with every label, best first; several classifiers need a model', async () => {
      const ambiguous = await system.post('/predict', { inputs: 'I like you' });
      assert.equal(ambiguous.status, 422);
      assert.match(
        ambiguous.body.error,
        new RegExp(
          `several served models .*${CLASSIFIER}.*${RERANKER}|several served models .*${RERANKER}.*${CLASSIFIER}`,
        ),
      );
      const single = await system.post('/predict', { inputs: 'I like you', model: CLASSIFIER });
      assert.equal(single.status, 200, JSON.stringify(single.body));
      assert.deepEqual(single.body.map((s: any) => s.label).sort(), ['NEGATIVE', 'POSITIVE']);
      assert.deepEqual(single.body, (await system.infer(CLASSIFIER, 'I like you', { top_k: null })).body[0]);
      const header = await system.post(
        '/predict',
        { inputs: [['a query', 'a passage']], raw_scores: true },
        { 'x-model': RERANKER },
      );
      assert.equal(header.status, 200, JSON.stringify(header.body));
      const pair = (
        await system.infer(RERANKER, { text: 'a query', text_pair: 'a passage' }, { function_to_apply: 'none' })
      ).body[0];
      assert.deepEqual(header.body, [pair]);
    });

    it('/rerank: each document alone scores as in-process (and as REFERENCE.json where this CPU reproduces it); several come back once each, best first', async (t: TestContext) => {
      const { query, results } = REF[RERANKER].cases[0];
      const tokenizer = await AutoTokenizer.from_pretrained(RERANKER);
      const model = await AutoModelForSequenceClassification.from_pretrained(RERANKER, { dtype: 'q8' });
      let reproduces = true;
      for (const r of results) {
        const res = await system.post('/rerank', { query, texts: [r.document], raw_scores: true, return_text: true });
        assert.equal(res.status, 200, JSON.stringify(res.body));
        const logit = (await model(tokenizer(query, { text_pair: r.document }))).logits.data[0];
        assert.deepEqual(
          res.body.map((x: any) => [x.index, x.text]),
          [[0, r.document]],
        );
        assert.ok(Math.abs(res.body[0].score - logit) <= TOL, `${res.body[0].score} vs in-process ${logit}`);
        const scored = await system.post('/rerank', { query, texts: [r.document] });
        assert.ok(
          Math.abs(scored.body[0].score - 1 / (1 + Math.exp(-logit))) <= TOL,
          'scores are the sigmoid of the logit',
        );
        if (Math.abs(res.body[0].score - r.logit) > TOL || Math.abs(scored.body[0].score - r.score) > TOL)
          reproduces = false;
      }
      if (!reproduces)
        t.diagnostic(
          `${RERANKER}: this CPU's q8 kernels differ from REFERENCE.json's machine; /rerank equals in-process here`,
        );
      const texts = results.map((r: any) => r.document);
      const all = await system.post('/rerank', { query, texts });
      assert.equal(all.status, 200);
      assert.deepEqual(all.body.map((x: any) => x.index).sort(), [0, 1, 2, 3]);
      const scores = all.body.map((x: any) => x.score);
      assert.deepEqual(
        scores,
        [...scores].sort((a: number, b: number) => b - a),
      );
      assert.equal(all.body[0].text, undefined, 'no text unless return_text');
    });

    it('/tokenize gives ids, texts and offsets, special tokens flagged; /info describes the model', async () => {
      const text = 'Zoë lives in Zürich';
      const res = await system.post('/tokenize', { inputs: text, model: CLASSIFIER });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      const tokens = res.body[0];
      const tokenizer = await AutoTokenizer.from_pretrained(CLASSIFIER);
      assert.deepEqual(
        tokens.map((t: any) => t.id),
        tokenizer.encode(text),
      );
      assert.deepEqual([tokens[0].special, tokens[tokens.length - 1].special], [true, true]);
      // UTF-8 byte offsets, as TEI gives them.
      const bytes = Buffer.from(text);
      for (const t of tokens.filter((t: any) => !t.special))
        assert.equal(bytes.subarray(t.start, t.stop).toString(), t.text);
      assert.deepEqual(tokens.find((t: any) => t.text === 'Zürich') && [tokens[4].start, tokens[4].stop], [14, 21]);
      const bare = await system.post('/tokenize', {
        inputs: [text, 'b'],
        add_special_tokens: false,
        model: CLASSIFIER,
      });
      assert.equal(bare.body.length, 2);
      assert.equal(bare.body[0].length, tokens.length - 2);
      const info = await get(`/info?model=${RERANKER}`);
      assert.equal(info.status, 200);
      assert.equal(info.body.model_id, RERANKER);
      assert.deepEqual(info.body.model_type, { reranker: { id2label: { 0: 'LABEL_0' }, label2id: { LABEL_0: 0 } } });
      assert.equal(info.body.max_input_length, 512);
      assert.ok(info.body.max_batch_requests > 0 && info.body.max_client_batch_size > 0);
    });

    it("/decode gives each sequence's text as Hugging Face tokenizers decode its ids", async () => {
      const text = 'Zoë lives in Zürich';
      const ids: number[] = (await system.post('/tokenize', { inputs: text, model: CLASSIFIER })).body[0].map(
        (t: any) => t.id,
      );
      // An id past the vocabulary, which the tokenizers library leaves out.
      const withUnknown = [...ids.slice(0, 2), 999_999, ...ids.slice(2)];
      const sequences = [ids, withUnknown, ids.slice(1, 3), []];
      const expected = (skip: boolean) => decodedByTokenizers(CLASSIFIER, sequences, skip);
      for (const skip of [true, false]) {
        const res = await system.post('/decode', { ids: sequences, skip_special_tokens: skip, model: CLASSIFIER });
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.deepEqual(res.body, expected(skip));
      }
      assert.equal(expected(true)[0], 'zoe lives in zurich', 'the reference decodes the uncased text');
      // One sequence is a list of one; special tokens are left out unless asked for, as TEI does.
      assert.deepEqual((await system.post('/decode', { ids, model: CLASSIFIER })).body, [expected(true)[0]]);
      assert.deepEqual((await system.post('/decode', { ids: [], model: CLASSIFIER })).body, ['']);
    });

    it("/similarity gives each sentence's cosine similarity to the source: from /embed's vectors, as sentence-similarity's", async () => {
      const source = 'What is Deep Learning?';
      const sentences = ['What is Machine Learning?', 'The cat sat on the mat', 'Deep learning is machine learning'];
      const res = await system.post('/similarity', { inputs: { source_sentence: source, sentences } });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.length, sentences.length);
      // TEI embeds all of them, unnormalised, and takes the cosine of each with the source.
      const vectors = (await system.post('/embed', { inputs: [source, ...sentences], normalize: false })).body;
      const dot = (a: number[], b: number[]) => a.reduce((n, x, i) => n + x * b[i], 0);
      const cosine = (a: number[], b: number[]) => dot(a, b) / Math.sqrt(dot(a, a) * dot(b, b));
      res.body.forEach((score: number, i: number) =>
        assert.ok(Math.abs(score - cosine(vectors[0], vectors[i + 1])) < 1e-5),
      );
      // The Inference API's sentence-similarity on the same model gives the same scores.
      const hf = await system.infer(EMBEDDER, { source_sentence: source, sentences });
      assert.equal(hf.status, 200, JSON.stringify(hf.body));
      hf.body.forEach((score: number, i: number) => assert.ok(Math.abs(score - res.body[i]) < 1e-4));
      // Long sentences are refused unless the parameters ask for them to be cut, from either end.
      const long = { source_sentence: source, sentences: [`${'word '.repeat(600)}learning`] };
      const refused = await system.post('/similarity', { inputs: long });
      assert.equal(refused.status, 422, JSON.stringify(refused.body));
      assert.match(refused.body.error, /accepts at most 512/);
      const right = await system.post('/similarity', { inputs: long, parameters: { truncate: true } });
      const left = await system.post('/similarity', {
        inputs: long,
        parameters: { truncate: true, truncation_direction: 'Left', prompt_name: null },
      });
      assert.equal(right.status, 200, JSON.stringify(right.body));
      assert.equal(left.status, 200, JSON.stringify(left.body));
      assert.notEqual(right.body[0], left.body[0], 'the kept tokens differ, so do the scores');
    });

    it("bad input gets a 4xx in TEI's shape {error, error_type}", async () => {
      const cases: Array<[string, unknown, number, RegExp]> = [
        ['/embed', {}, 422, /inputs is required/],
        ['/embed', { inputs: [''] }, 400, /`inputs` cannot be empty/],
        ['/embed', { inputs: 'x', normalize: 'yes' }, 422, /normalize/],
        ['/rerank', { query: 'q', texts: [] }, 400, /`texts` cannot be empty/],
        ['/rerank', { texts: ['a'] }, 422, /query/],
        ['/rerank', { query: 'q', texts: ['a'], model: EMBEDDER }, 422, /is not a reranker/],
        ['/predict', { inputs: [], model: CLASSIFIER }, 400, /`inputs` cannot be empty/],
        ['/embed', { inputs: Array(2049).fill('x') }, 422, /2049 inputs in one request; at most 2048/],
        // TEI tokenizes at most 250 characters per token of the model's length (512 here) whole.
        [
          '/tokenize',
          { inputs: ['short', 'word '.repeat(30_000)], model: CLASSIFIER },
          422,
          /^inputs\[1\]: `inputs` must have less than 128000 characters\. Given: 150000$/,
        ],
        // Truncation off, a long text is read only as far as shows it too long.
        [
          '/embed',
          { inputs: 'word '.repeat(150_000) },
          422,
          /^input is at least \d+ tokens long but this model accepts at most 512/,
        ],
        [
          '/predict',
          { inputs: ['b', 'word '.repeat(150_000)], model: CLASSIFIER },
          422,
          /^input is at least \d+ tokens long but this model accepts at most 512/,
        ],
        ['/similarity', { inputs: { source_sentence: 'q', sentences: [] } }, 400, /`inputs.sentences` cannot be empty/],
        ['/similarity', { inputs: 'q' }, 422, /inputs must be \{"source_sentence"/],
        [
          '/similarity',
          { inputs: { source_sentence: 'q', sentences: ['a'] }, parameters: { truncation_direction: 'Up' } },
          422,
          /truncation_direction/,
        ],
        [
          '/similarity',
          { inputs: { source_sentence: 'q', sentences: ['a'] }, model: CLASSIFIER },
          422,
          /is not an embedding model/,
        ],
        ['/decode', { model: CLASSIFIER }, 422, /ids is required/],
        ['/decode', { ids: [101, -1], model: CLASSIFIER }, 422, /ids must not be negative/],
        ['/decode', { ids: 'hello', model: CLASSIFIER }, 422, /ids must be a list of token ids/],
        ['/decode', { ids: [101], skip_special_tokens: 'yes', model: CLASSIFIER }, 422, /skip_special_tokens/],
        // As a text to tokenize, ids to decode are bounded by the model's length: 250 per token (512 here).
        ['/decode', { ids: Array(128_001).fill(7), model: CLASSIFIER }, 422, /must hold at most 128000 ids/],
      ];
      for (const [path, body, status, message] of cases) {
        const res = await system.post(path, body);
        assert.equal(
          res.status,
          status,
          `${path} ${JSON.stringify(body).slice(0, 200)}: ${JSON.stringify(res.body).slice(0, 500)}`,
        );
        assert.match(res.body.error, message);
        assert.equal(typeof res.body.error_type, 'string');
      }
    });
  });

  describe("Cohere's rerank", () => {
    const QUERY = 'What is the capital of France?';
    const DOCUMENTS = [
      'Paris is the capital and largest city of France.',
      'Berlin is the capital of Germany.',
      'The Eiffel Tower was finished in 1889.',
    ];
    const teiRanks = async (texts: string[]) => {
      const res = await system.post('/rerank', { query: QUERY, texts });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      return res.body as Array<{ index: number; score: number }>;
    };
    const options = () => ({ token: 'unused', baseUrl: system.url, maxRetries: 0 });

    it("Cohere's v2 client ranks as TEI's /rerank does, top_n cutting the list", async () => {
      const client = new CohereClientV2(options());
      const answer = await client.rerank({ model: RERANKER, query: QUERY, documents: DOCUMENTS, topN: 2 });
      const expected = await teiRanks(DOCUMENTS);
      assert.equal(answer.results.length, 2);
      answer.results.forEach((r, i) => {
        assert.equal(r.index, expected[i].index);
        assert.ok(Math.abs(r.relevanceScore - expected[i].score) < 1e-6, `${r.relevanceScore} vs ${expected[i].score}`);
      });
      assert.equal(answer.meta?.apiVersion?.version, '2');
      assert.equal(answer.meta?.billedUnits?.searchUnits, 1);
      assert.ok((answer.meta?.billedUnits?.inputTokens ?? 0) > DOCUMENTS.length, JSON.stringify(answer.meta));
      assert.equal(typeof answer.id, 'string');
    });

    it("Cohere's v1 client (Jina's shape): documents as objects, given back with their other fields", async () => {
      const client = new CohereClient(options());
      const documents = DOCUMENTS.map((text, i) => ({ text, source: `doc-${i}` }));
      const answer = await client.rerank({ model: RERANKER, query: QUERY, documents, returnDocuments: true });
      const expected = await teiRanks(DOCUMENTS);
      assert.deepEqual(
        answer.results.map((r) => r.index),
        expected.map((r) => r.index),
      );
      for (const r of answer.results) assert.deepEqual(r.document, documents[r.index]);
      assert.equal(answer.meta?.apiVersion?.version, '1');
      // Without return_documents, no documents come back.
      const bare = await client.rerank({ model: RERANKER, query: QUERY, documents: DOCUMENTS });
      assert.ok(bare.results.every((r) => r.document === undefined));
    });

    it("max_tokens_per_doc keeps each document's first tokens: the score of the document cut by hand", async () => {
      const client = new CohereClientV2(options());
      // Each word is one token of this vocabulary.
      const cut = await client.rerank({
        model: RERANKER,
        query: QUERY,
        documents: ['paris is the capital of france and a large city'],
        maxTokensPerDoc: 3,
      });
      const [byHand] = await teiRanks(['paris is the']);
      const [whole] = await teiRanks(['paris is the capital of france and a large city']);
      assert.ok(Math.abs(cut.results[0].relevanceScore - byHand.score) < 1e-6, `${cut.results[0].relevanceScore}`);
      assert.notEqual(byHand.score, whole.score);
    });

    it("bad requests get a 4xx with Cohere's {message}, which its client raises", async () => {
      const client = new CohereClientV2(options());
      await assert.rejects(
        client.rerank({ model: RERANKER, query: QUERY, documents: DOCUMENTS, topN: 0 }),
        (err: any) => err.statusCode === 400 && /^top_n: must be a positive integer$/.test(err.body?.message),
      );
      const cases: Array<[string, unknown, number, RegExp]> = [
        ['/v2/rerank', { model: RERANKER, query: QUERY, documents: [] }, 400, /^documents: must not be empty$/],
        [
          '/v2/rerank',
          { model: RERANKER, query: QUERY, documents: [''] },
          400,
          /^documents\.0: must not be an empty string$/,
        ],
        ['/v1/rerank', { model: RERANKER, query: QUERY, documents: [{ title: 'x' }] }, 400, /"text" string/],
        ['/v1/rerank', { model: RERANKER, query: '', documents: ['a'] }, 400, /^query: must not be empty$/],
        [
          '/v2/rerank',
          { model: RERANKER, query: QUERY, documents: ['a'], top_n: 1.5 },
          400,
          /^top_n: must be a positive integer$/,
        ],
        ['/v2/rerank', { model: EMBEDDER, query: QUERY, documents: ['a'] }, 400, /is not a reranker/],
        ['/v2/rerank', { model: RERANKER, query: QUERY, documents: Array(2049).fill('a') }, 413, /at most 2048/],
      ];
      for (const [path, body, status, message] of cases) {
        const res = await system.post(path, body);
        assert.equal(res.status, status, `${path} ${JSON.stringify(body).slice(0, 200)}: ${JSON.stringify(res.body)}`);
        assert.deepEqual(Object.keys(res.body), ['message']);
        assert.match(res.body.message, message);
      }
    });
  });

  describe('KServe v2', () => {
    it('health, server and model metadata, readiness', async () => {
      assert.deepEqual((await get('/v2/health/live')).body, { live: true });
      assert.deepEqual((await get('/v2/health/ready')).body, { ready: true });
      const server = await get('/v2');
      assert.equal(server.body.name, 'tserve');
      assert.deepEqual(server.body.extensions, ['binary_tensor_data']);
      const meta = await get(`/v2/models/${CLASSIFIER}`);
      assert.equal(meta.status, 200);
      assert.deepEqual(meta.body.inputs, [{ name: 'text', datatype: 'BYTES', shape: [-1] }]);
      assert.deepEqual(meta.body.outputs[0], { name: 'probabilities', datatype: 'FP32', shape: [-1, 2] });
      assert.deepEqual((await get(`/v2/models/${encodeURIComponent(EMBEDDER)}/ready`)).body, {
        name: EMBEDDER,
        ready: true,
      });
      assert.equal((await get('/v2/models/no/such/ready')).status, 404);
    });

    it('infer on a BYTES tensor answers FP32 tensors equal to /models/<id>, and echoes the id', async () => {
      const texts = ['I love this', 'I hate this'];
      const callsBefore = await modelCalls(CLASSIFIER);
      const res = await system.post(`/v2/models/${CLASSIFIER}/infer`, {
        id: 'req-42',
        inputs: [{ name: 'text', shape: [2, 1], datatype: 'BYTES', data: [[texts[0]], [texts[1]]] }],
        outputs: [{ name: 'probabilities' }, { name: 'logits' }],
      });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.id, 'req-42');
      assert.equal(res.body.model_name, CLASSIFIER);
      const [probs, logits] = res.body.outputs;
      assert.deepEqual([probs.name, probs.datatype, probs.shape], ['probabilities', 'FP32', [2, 2]]);
      assert.equal(logits.name, 'logits');
      const labels = (await get(`/v2/models/${CLASSIFIER}`)).body.parameters.labels as string[];
      const own = (await system.infer(CLASSIFIER, texts, { top_k: null })).body as Array<
        Array<{ label: string; score: number }>
      >;
      own.forEach((scores, row) =>
        labels.forEach((label, j) =>
          assert.ok(Math.abs(probs.data[row * 2 + j] - scores.find((s) => s.label === label)!.score) < 1e-6),
        ),
      );
      const raw = (await system.infer(CLASSIFIER, texts, { top_k: null, function_to_apply: 'none' })).body as Array<
        Array<{ label: string; score: number }>
      >;
      raw.forEach((scores, row) =>
        labels.forEach((label, j) =>
          assert.ok(Math.abs(logits.data[row * 2 + j] - scores.find((s) => s.label === label)!.score) < 1e-6),
        ),
      );
      // Both outputs came from one model run: the probabilities are the softmax of the logits.
      assert.equal(
        (await modelCalls(CLASSIFIER)) - callsBefore,
        3,
        'the KServe request, then the two /models calls: one run each',
      );
      const embedded = await system.post(`/v2/models/${EMBEDDER}/infer`, {
        inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['hello world'] }],
        parameters: { timeout: 5_000_000, priority: 2 },
      });
      assert.equal(embedded.status, 200, JSON.stringify(embedded.body));
      const own1 = (await system.infer(EMBEDDER, 'hello world')).body as number[];
      assert.deepEqual(embedded.body.outputs[0].shape, [1, 384]);
      embedded.body.outputs[0].data.forEach((v: number, i: number) => assert.ok(Math.abs(v - own1[i]) < 1e-6));
    });

    it("Triton's HTTP client's own request: no content type, the texts as binary BYTES, the outputs asked for as binary", async () => {
      // Built as tritonclient.http builds it: with no outputs named it sets binary_data_output.
      const texts = ['I love this', 'Zoë hates this 😀'];
      const tensor = bytesTensor(texts);
      const [request, requestHeaderLength] = binaryRequest(
        {
          id: '7',
          inputs: [{ name: 'text', shape: [2], datatype: 'BYTES', parameters: { binary_data_size: tensor.length } }],
          parameters: { binary_data_output: true },
        },
        tensor,
      );
      const res = await fetch(`${system.url}/v2/models/${CLASSIFIER}/infer`, {
        method: 'POST',
        headers: { 'inference-header-content-length': requestHeaderLength },
        body: request,
      });
      const body = Buffer.from(await res.arrayBuffer());
      assert.equal(res.status, 200, body.toString());
      assert.equal(res.headers.get('content-type'), 'application/octet-stream');
      const headerLength = Number(res.headers.get('inference-header-content-length'));
      const answer = JSON.parse(body.subarray(0, headerLength).toString());
      assert.equal(answer.id, '7');
      assert.deepEqual(answer.outputs, [
        { name: 'probabilities', datatype: 'FP32', shape: [2, 2], parameters: { binary_data_size: 16 } },
      ]);
      const binary = body.subarray(headerLength);
      const probabilities = Array.from({ length: 4 }, (_, i) => binary.readFloatLE(i * 4));

      // The same texts as JSON, outputs as JSON: the same numbers, to FP32's precision.
      const json = await system.post(`/v2/models/${CLASSIFIER}/infer`, {
        inputs: [{ name: 'text', shape: [2], datatype: 'BYTES', data: texts }],
      });
      assert.equal(json.status, 200, JSON.stringify(json.body));
      json.body.outputs[0].data.forEach((v: number, i: number) => assert.equal(probabilities[i], Math.fround(v)));

      // An output's own binary_data outranks the request's binary_data_output.
      const mixed = await fetch(`${system.url}/v2/models/${CLASSIFIER}/infer`, {
        method: 'POST',
        body: JSON.stringify({
          inputs: [{ name: 'text', shape: [2], datatype: 'BYTES', data: texts }],
          outputs: [{ name: 'probabilities', parameters: { binary_data: false } }],
          parameters: { binary_data_output: true },
        }),
      });
      assert.equal(mixed.status, 200);
      assert.equal(mixed.headers.get('inference-header-content-length'), null);
      assert.deepEqual(((await mixed.json()) as { outputs: unknown }).outputs, json.body.outputs);
    });

    it('bad requests get a 4xx with {"error": "..."} (written from the spec\'s required API)', async () => {
      const url = `/v2/models/${CLASSIFIER}/infer`;
      const tensor = { name: 'text', shape: [1], datatype: 'BYTES', data: ['x'] };
      const cases: Array<[string, unknown, number, RegExp]> = [
        [url, {}, 400, /inputs/],
        [url, { inputs: [] }, 400, /exactly one input/],
        [url, { inputs: [{ ...tensor, datatype: 'FP32', data: [1] }] }, 400, /datatype must be BYTES/],
        [url, { inputs: [{ ...tensor, shape: [2] }] }, 400, /holds 2 texts but data has 1/],
        [url, { inputs: [{ ...tensor, shape: [1, 2], data: ['a', 'b'] }] }, 400, /shape must be \[n\] or \[n, 1\]/],
        [url, { inputs: [{ ...tensor, data: [''] }] }, 400, /non-empty string/],
        [url, { inputs: [tensor], outputs: [{ name: 'embeddings' }] }, 400, /unknown output/],
        [url, { inputs: [tensor], parameters: { timeout: -1 } }, 400, /timeout/],
        [`/v2/models/no/such/infer`, { inputs: [tensor] }, 404, /not served/],
        [`/v2/models/${CLASSIFIER}/versions/7/infer`, { inputs: [tensor] }, 404, /version 7/],
      ];
      const nineBytes = JSON.stringify({
        inputs: [{ ...tensor, data: undefined, parameters: { binary_data_size: 9 } }],
      });
      const binaryCases: Array<[string, string, RegExp]> = [
        ['{"inputs": []}', '99', /Inference-Header-Content-Length/],
        [`${nineBytes}abc`, String(nineBytes.length), /binary_data_size is 9 bytes but 3 follow/],
      ];
      for (const [body, headerLength, message] of binaryCases) {
        const res = await fetch(`${system.url}${url}`, {
          method: 'POST',
          headers: { 'inference-header-content-length': headerLength },
          body,
        });
        const answer = (await res.json()) as { error: string };
        assert.equal(res.status, 400, JSON.stringify(answer));
        assert.match(answer.error, message);
      }
      // Data nested deeper than any shape allows, 300,000 lists deep: no text, and no stack to overflow.
      const deep = `{"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ${'['.repeat(300_000)}"x"${']'.repeat(300_000)}}]}`;
      cases.push([url, deep, 400, /every element must be a non-empty string/]);
      for (const [path, body, status, message] of cases) {
        const res = await system.post(path, body);
        assert.equal(res.status, status, `${JSON.stringify(body)}: ${JSON.stringify(res.body)}`);
        assert.deepEqual(Object.keys(res.body), ['error']);
        assert.match(res.body.error, message);
      }
    });
  });
});
