/**
 * Issue 86: Ollama's embedding API (with the `ollama` npm client and LangChain's OllamaEmbeddings),
 * Cohere's embed (with the `cohere-ai` client) and its compact vectors, which OpenAI's and TEI's
 * embedding routes answer too, each equal to a reference numpy computes; the managed platforms'
 * routes (SageMaker's /ping and /invocations, Vertex AI's AIP_* routes and body); and ROOT_PATH,
 * every route, the dashboard and /docs under a prefix and nothing outside it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { Ollama } from 'ollama';
import { OllamaEmbeddings } from '@langchain/ollama';
import { CohereClient, CohereClientV2 } from 'cohere-ai';
import { freePort, ROOT, TestSystem, uniquePrefix, waitFor } from './helpers/system.ts';
import { linkedModelDir } from './helpers/fp32-models.ts';
import { CLASSIFIER, EMBEDDER, RERANKER } from './helpers/replicas.ts';

type Vectors = number[][];
const TYPES = ['float', 'int8', 'uint8', 'binary', 'ubinary', 'base64'] as const;
const PYTHON = fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

/** Each compact type of `vectors`, as numpy computes it (test/helpers/compact-reference.py). */
function numpyReference(vectors: Vectors): Record<(typeof TYPES)[number], unknown[]> {
  return JSON.parse(
    execFileSync(PYTHON, [path.join(ROOT, 'test/helpers/compact-reference.py')], {
      input: JSON.stringify(vectors),
      encoding: 'utf8',
      maxBuffer: 256 * 1024 * 1024,
    }),
  );
}

/** Throws unless two lists of vectors agree value by value to `tolerance`. */
function assertClose(actual: Vectors, expected: Vectors, tolerance: number, how: string): void {
  assert.equal(actual.length, expected.length, `${how}: vectors`);
  let largest = 0;
  actual.forEach((v, i) => {
    assert.equal(v.length, expected[i].length, `${how}: vector ${i}'s length`);
    v.forEach((x, j) => (largest = Math.max(largest, Math.abs(x - expected[i][j]))));
  });
  assert.ok(largest <= tolerance, `${how}: a value differs by ${largest}`);
}

const TEXTS = ['How many people live in Berlin?', 'Berlin has 3,520,031 registered inhabitants.', 'Fine.'];
const LONG = 'berlin '.repeat(700);

describe('embedding APIs: Ollama, Cohere embed, compact vectors, platforms, ROOT_PATH', () => {
  /** The embedder with named prompts; and the same files as a model with none. */
  const PLAIN = `${EMBEDDER}-plain`;
  const models = linkedModelDir([EMBEDDER, RERANKER, CLASSIFIER]);
  fs.cpSync(path.join(models.dir, EMBEDDER), path.join(models.dir, PLAIN), { recursive: true, verbatimSymlinks: true });
  fs.writeFileSync(
    path.join(models.dir, EMBEDDER, 'config_sentence_transformers.json'),
    JSON.stringify({ prompts: { query: 'query: ', passage: 'passage: ' }, default_prompt_name: null }),
  );
  const common = { MODEL_DIR: models.dir };
  const aliases = `nomic-embed-text=${EMBEDDER},embed-english-v3.0=${EMBEDDER}`;
  const system = new TestSystem(uniquePrefix('embed-apis'), undefined, common);
  /** Over the same workers: Vertex AI's settings, the reranker its default model. */
  const platform = new TestSystem(system.prefix, undefined, common);
  /** Over the same workers: every route under /tserve, the classifier its default model. */
  const rooted = new TestSystem(system.prefix, undefined, { ...common, ROOT_PATH: '/tserve' });
  const DASHBOARD_TOKEN = 'dashboard-secret';

  before(async () => {
    await system.startGateway({ MODEL_ALIASES: aliases, DEFAULT_MODEL: EMBEDDER });
    // DTYPE=auto: int8 per row on a CPU, whose vectors do not depend on their batch mates.
    system.startWorker({ model: EMBEDDER, env: { MATRYOSHKA_DIMENSIONS: '256,128' } });
    system.startWorker({ model: PLAIN });
    for (const model of [RERANKER, CLASSIFIER]) system.startWorker({ model, env: { DTYPE: 'q8' } });
    // Vertex AI names the port (AIP_HTTP_PORT): PORT is left to a port nothing listens on.
    platform.port = await freePort();
    await platform.startGateway({
      PORT: String(await freePort()),
      AIP_HTTP_PORT: String(platform.port),
      AIP_HEALTH_ROUTE: '/vertex/health',
      AIP_PREDICT_ROUTE: '/vertex/predict',
      DEFAULT_MODEL: RERANKER,
    });
    await rooted.startGateway({ DEFAULT_MODEL: CLASSIFIER, DASHBOARD_TOKEN, MODEL_ALIASES: aliases });
    for (const model of [EMBEDDER, PLAIN, RERANKER, CLASSIFIER]) await system.waitForWorkers(model);
    await platform.waitForWorkers(RERANKER);
    await rooted.waitForWorkers(CLASSIFIER);
  });
  after(async () => {
    await Promise.all([rooted.stop(), platform.stop()]);
    await system.stop();
    models.remove();
  });

  const ok = async (on: TestSystem, pathname: string, body: unknown) => {
    const res = await on.post(pathname, body);
    assert.equal(res.status, 200, `${pathname}: ${JSON.stringify(res.body).slice(0, 300)}`);
    return res.body;
  };
  /** TEI's /embed of the texts: the vectors every other route is held to. */
  const embed = (texts: string[], extra: Record<string, unknown> = {}): Promise<Vectors> =>
    ok(system, '/embed', { inputs: texts, model: EMBEDDER, ...extra });

  describe("Ollama's API", () => {
    const client = () => new Ollama({ host: system.url });

    it('ollama.embed gives /embed’s vectors, by id, alias and tag; dimensions shortens as /embed does', async () => {
      const expected = await embed(TEXTS);
      for (const model of [EMBEDDER, `${EMBEDDER}:latest`, 'nomic-embed-text', 'nomic-embed-text:latest']) {
        const answer = await client().embed({ model, input: TEXTS });
        assert.equal(answer.model, model);
        assertClose(answer.embeddings, expected, 1e-6, model);
        assert.ok(answer.prompt_eval_count > TEXTS.length, JSON.stringify(answer.prompt_eval_count));
        assert.ok(answer.total_duration > 0 && answer.load_duration >= 0, JSON.stringify(answer));
        assert.ok(answer.total_duration >= answer.load_duration);
      }
      const one = await client().embed({ model: 'nomic-embed-text', input: TEXTS[0] });
      assertClose(one.embeddings, [expected[0]], 1e-6, 'one text');
      const short = await client().embed({ model: 'nomic-embed-text', input: TEXTS, dimensions: 64 });
      assertClose(short.embeddings, await embed(TEXTS, { dimensions: 64 }), 1e-6, 'dimensions 64');
      // Ollama keeps every value where dimensions asks for more than the vector holds.
      const all = await client().embed({ model: 'nomic-embed-text', input: TEXTS, dimensions: 4096 });
      assertClose(all.embeddings, expected, 1e-6, 'dimensions 4096');
    });

    it('ollama.embeddings gives the vector unnormalised, as Ollama’s older route does', async () => {
      const answer = await client().embeddings({ model: 'nomic-embed-text', prompt: TEXTS[1] });
      const [raw] = await embed([TEXTS[1]], { normalize: false });
      assertClose([answer.embedding], [raw], 1e-6, '/api/embeddings');
      assert.ok(Math.abs(Math.hypot(...raw) - 1) > 1e-3, 'the raw vector is not of length 1');
    });

    it("LangChain's OllamaEmbeddings embeds documents and a query as /embed does", async () => {
      const embeddings = new OllamaEmbeddings({ model: 'nomic-embed-text', baseUrl: system.url });
      assertClose(await embeddings.embedDocuments(TEXTS), await embed(TEXTS), 1e-6, 'embedDocuments');
      assertClose([await embeddings.embedQuery(TEXTS[0])], await embed([TEXTS[0]]), 1e-6, 'embedQuery');
    });

    it('ollama.list names each embedding model and alias with its tag; ollama.version answers', async () => {
      const { models: listed } = await client().list();
      const names = listed.map((m) => m.name).sort();
      assert.deepEqual(
        names,
        ['embed-english-v3.0', 'nomic-embed-text', EMBEDDER, PLAIN].map((name) => `${name}:latest`).sort(),
      );
      for (const m of listed) {
        assert.equal(m.model, m.name);
        assert.ok(!Number.isNaN(Date.parse(String(m.modified_at))), String(m.modified_at));
        assert.deepEqual((m as unknown as { capabilities: string[] }).capabilities, ['embedding']);
      }
      assert.match((await client().version()).version, /^\d+\.\d+\.\d+$/);
      const head = await fetch(`${system.url}/api/tags`, { method: 'HEAD' });
      assert.equal(head.status, 200);
    });

    it("refuses in Ollama's shape, with its statuses, which its client raises", async () => {
      const raised = async (call: Promise<unknown>, status: number, message: RegExp) =>
        assert.rejects(call, (err: any) => {
          assert.equal(err.name, 'ResponseError');
          assert.equal(err.status_code, status, err.error);
          assert.match(err.error, message);
          return true;
        });
      await raised(client().embed({ model: 'no-such-model', input: 'x' }), 404, /^model 'no-such-model' not found/);
      await raised(client().embed({ model: RERANKER, input: 'x' }), 400, /is not an embedding model/);
      await raised(client().embed({ model: EMBEDDER, input: LONG, truncate: false }), 400, /accepts at most 512/);
      await raised(client().embeddings({ model: 'no-such-model', prompt: 'x' }), 404, /not found/);
      const cases: Array<[string, unknown, number, RegExp]> = [
        ['/api/embed', { model: EMBEDDER, input: [1, 2] }, 400, /invalid input type/],
        ['/api/embed', { input: 'x' }, 400, /^model: model is required$/],
        ['/api/embed', { model: EMBEDDER, input: 'x', truncate: 'yes' }, 400, /^truncate:/],
        ['/api/embeddings', { prompt: 'x' }, 400, /model is required/],
        ['/api/no-such-route', {}, 404, /^no route for POST \/api\/no-such-route/],
      ];
      for (const [pathname, body, status, message] of cases) {
        const res = await system.post(pathname, body);
        assert.equal(res.status, status, `${pathname} ${JSON.stringify(body)}: ${JSON.stringify(res.body)}`);
        assert.deepEqual(Object.keys(res.body), ['error']);
        assert.match(res.body.error, message);
      }
      const none = await fetch(`${system.url}/api/embed`, { method: 'POST' });
      assert.deepEqual([none.status, await none.json()], [400, { error: 'missing request body' }]);
    });

    it("the bodies Weaviate's text2vec-ollama, Open WebUI and Spring AI send: /embed's vectors", async () => {
      const expected = await embed(TEXTS);
      const bodies = [
        // Weaviate's text2vec-ollama (its clients/ollama.go): model and a list of texts.
        { model: 'nomic-embed-text', input: TEXTS },
        // Open WebUI's batch embedding: input first.
        { input: TEXTS, model: 'nomic-embed-text:latest' },
        // Spring AI's OllamaApi.EmbeddingsRequest: empty options, a keep_alive, truncate.
        { model: 'nomic-embed-text', input: TEXTS, keep_alive: '5m', options: {}, truncate: true },
      ];
      for (const body of bodies) {
        const res = await system.post('/api/embed', body);
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.equal(res.headers.get('x-ignored-fields'), null);
        assertClose(res.body.embeddings, expected, 1e-6, JSON.stringify(body).slice(0, 80));
      }
    });

    it('an empty input loads nothing and answers no vectors; cut inputs answer; unknown fields are named', async () => {
      for (const input of ['', [], undefined])
        assert.deepEqual(await ok(system, '/api/embed', { model: 'nomic-embed-text', input }), {
          model: 'nomic-embed-text',
          embeddings: [],
        });
      assert.deepEqual(await ok(system, '/api/embeddings', { model: EMBEDDER, prompt: '' }), { embedding: [] });
      // truncate defaults to true: a long input is cut to the model's length, as /embed cuts it.
      const cut = await ok(system, '/api/embed', { model: EMBEDDER, input: LONG, keep_alive: '5m', options: {} });
      assertClose(cut.embeddings, await embed([LONG], { truncate: true }), 1e-6, 'cut');
      const res = await system.post('/api/embed', { model: EMBEDDER, input: 'x', think: true });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('x-ignored-fields'), 'think');
    });
  });

  describe("Cohere's embed and compact vectors", () => {
    const options = () => ({ token: 'unused', baseUrl: system.url, maxRetries: 0 });

    it("cohere-ai's v2.embed: every type, float as /embed’s, the others numpy's of those floats", async () => {
      const client = new CohereClientV2(options());
      const answer = await client.embed({
        model: 'embed-english-v3.0',
        texts: TEXTS,
        inputType: 'search_document',
        embeddingTypes: [...TYPES],
      });
      const floats = answer.embeddings.float as Vectors;
      // search_document is the model's passage prompt.
      assertClose(floats, await embed(TEXTS, { prompt_name: 'passage' }), 1e-6, 'float');
      const reference = numpyReference(floats);
      for (const type of TYPES) assert.deepEqual(answer.embeddings[type], reference[type], type);
      assert.deepEqual(answer.texts, TEXTS);
      assert.equal(answer.meta?.apiVersion?.version, '2');
      assert.ok((answer.meta?.billedUnits?.inputTokens ?? 0) > TEXTS.length);
      assert.equal(answer.embeddings.ubinary?.[0].length, 384 / 8);
    });

    it('input_type picks the model’s prompt; a model with none embeds every type alike', async () => {
      const client = new CohereClientV2(options());
      const vectors = async (model: string, inputType: 'search_query' | 'classification' | 'clustering') =>
        (await client.embed({ model, texts: TEXTS, inputType, embeddingTypes: ['float'] })).embeddings.float as Vectors;
      assertClose(await vectors(EMBEDDER, 'search_query'), await embed(TEXTS, { prompt_name: 'query' }), 1e-6, 'query');
      const plain = await embed(TEXTS, { model: PLAIN });
      for (const inputType of ['search_query', 'classification', 'clustering'] as const)
        assertClose(await vectors(PLAIN, inputType), plain, 1e-6, `${PLAIN} ${inputType}`);
      // A model with prompts and none for the type: refused, naming its prompts.
      await assert.rejects(vectors(EMBEDDER, 'classification'), (err: any) => {
        assert.equal(err.statusCode, 400);
        assert.match(err.body.message, /has no prompt for classification .*; its prompts: query, passage$/);
        return true;
      });
      // inputs with text content are the texts; without input_type, the model's default prompt.
      const inputs = await ok(system, '/v2/embed', {
        model: EMBEDDER,
        inputs: TEXTS.map((text) => ({ content: [{ type: 'text', text }] })),
      });
      assertClose(inputs.embeddings.float, await embed(TEXTS), 1e-6, 'inputs');
    });

    it('output_dimension takes the sizes /info lists; truncate START keeps the last tokens, NONE refuses', async () => {
      const info = (await (await fetch(`${system.url}/info?model=${EMBEDDER}`)).json()) as Record<string, unknown>;
      assert.deepEqual(info.matryoshka_dimensions, [256, 128]);
      const short = await ok(system, '/v2/embed', { model: EMBEDDER, texts: TEXTS, output_dimension: 128 });
      assertClose(short.embeddings.float, await embed(TEXTS, { dimensions: 128 }), 1e-6, 'output_dimension');
      const refusals: Array<[unknown, RegExp]> = [
        [{ model: EMBEDDER, texts: TEXTS, output_dimension: 100 }, /^output_dimension: must be one of 256, 128/],
        [{ model: PLAIN, texts: TEXTS, output_dimension: 128 }, /cannot be shortened/],
        [{ model: EMBEDDER, texts: [LONG], truncate: 'NONE' }, /accepts at most 512/],
      ];
      for (const [body, message] of refusals) {
        const res = await system.post('/v2/embed', body);
        assert.equal(res.status, 400, JSON.stringify(res.body));
        assert.match(res.body.message, message);
      }
      const start = await ok(system, '/v2/embed', { model: EMBEDDER, texts: [`hello ${LONG}`], truncate: 'START' });
      assertClose(
        start.embeddings.float,
        await embed([`hello ${LONG}`], { truncate: true, truncation_direction: 'Left' }),
        1e-6,
        'START',
      );
      const end = await ok(system, '/v2/embed', { model: EMBEDDER, texts: [`hello ${LONG}`] });
      assertClose(end.embeddings.float, await embed([`hello ${LONG}`], { truncate: true }), 1e-6, 'END');
    });

    it("cohere-ai's v1 embed: floats without embedding_types, by type with them", async () => {
      const client = new CohereClient(options());
      const floats = await client.embed({ model: EMBEDDER, texts: TEXTS });
      assert.equal(floats.responseType, 'embeddings_floats');
      assertClose(floats.embeddings, await embed(TEXTS), 1e-6, 'v1 floats');
      const typed = await client.embed({ model: EMBEDDER, texts: TEXTS, embeddingTypes: ['int8', 'ubinary'] });
      assert.equal(typed.responseType, 'embeddings_by_type');
      const byType = typed.embeddings as Record<string, unknown>;
      const reference = numpyReference(await embed(TEXTS));
      assert.deepEqual([byType.int8, byType.ubinary, byType.float], [reference.int8, reference.ubinary, undefined]);
      assert.equal(typed.meta?.apiVersion?.version, '1');
    });

    it("the bodies of LangChain's and LlamaIndex's Cohere embeddings (Python's cohere client, v1)", async () => {
      // cohere.Client.embed as CohereEmbeddings and CohereEmbedding call it: typed floats, truncate END.
      const body = {
        texts: TEXTS,
        model: 'embed-english-v3.0',
        input_type: 'search_query',
        embedding_types: ['float'],
        truncate: 'END',
      };
      const res = await system.post('/v1/embed', body);
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.body.response_type, 'embeddings_by_type');
      assertClose(res.body.embeddings.float, await embed(TEXTS, { prompt_name: 'query' }), 1e-6, 'v1 typed');
    });

    it("refuses bad bodies with Cohere's {message}", async () => {
      const cases: Array<[unknown, number, RegExp]> = [
        [{ model: EMBEDDER }, 400, /^body: send either texts or inputs$/],
        [{ model: EMBEDDER, texts: TEXTS, inputs: [] }, 400, /^inputs: must not be empty/],
        [{ model: EMBEDDER, texts: ['x'], embedding_types: ['int4'] }, 400, /^embedding_types\.0: each must be one of/],
        [{ model: EMBEDDER, texts: ['x'], input_type: 'search' }, 400, /^input_type: must be one of/],
        [{ model: EMBEDDER, texts: ['x'], input_type: 'image' }, 400, /embeds text only/],
        [{ model: EMBEDDER, texts: ['x'], truncate: 'MIDDLE' }, 400, /^truncate: must be NONE, START or END$/],
        [
          { model: EMBEDDER, inputs: [{ content: [{ type: 'image_url', image_url: { url: 'data:' } }] }] },
          400,
          /^inputs\.0\.content\.0: this server embeds text only$/,
        ],
        [{ model: 'no-such-model', texts: ['x'] }, 404, /no-such-model is not served/],
        [{ model: RERANKER, texts: ['x'] }, 400, /is not an embedding model/],
      ];
      for (const [body, status, message] of cases) {
        const res = await system.post('/v2/embed', body);
        assert.equal(res.status, status, `${JSON.stringify(body)}: ${JSON.stringify(res.body)}`);
        assert.deepEqual(Object.keys(res.body), ['message']);
        assert.match(res.body.message, message);
      }
    });

    it("OpenAI's route (encoding_format) and TEI's /embed (embedding_type) answer the same types", async () => {
      const floats = await embed(TEXTS);
      const reference = numpyReference(floats);
      const openai = new OpenAI({ baseURL: `${system.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      for (const type of TYPES) {
        // TEI's answer stays lists of numbers: base64 is OpenAI's and Cohere's.
        if (type !== 'base64')
          assert.deepEqual(await embed(TEXTS, { embedding_type: type }), reference[type], `TEI ${type}`);
        // The client decodes base64 itself only where it chose it; a format the caller names comes back as sent.
        const answer = await openai.embeddings.create({
          model: EMBEDDER,
          input: TEXTS,
          encoding_format: type as 'float',
        });
        assert.deepEqual(
          answer.data.map((d) => d.embedding),
          reference[type],
          `OpenAI ${type}`,
        );
      }
      // With the client's own default (base64, which it decodes): its floats.
      const decoded = await openai.embeddings.create({ model: EMBEDDER, input: TEXTS });
      assertClose(
        decoded.data.map((d) => d.embedding),
        floats,
        1e-6,
        'OpenAI default',
      );
      for (const embedding_type of ['int4', 'base64']) {
        const bad = await system.post('/embed', { inputs: 'x', model: EMBEDDER, embedding_type });
        assert.equal(bad.status, 422, JSON.stringify(bad.body));
        assert.match(bad.body.error, /^embedding_type: /);
      }
    });

    it('an ubinary answer for 1,000 vectors is at least 20× smaller on the wire than the float one', async () => {
      const texts = Array.from({ length: 1000 }, (_, i) => `Sentence number ${i} about the city of Berlin.`);
      const bytes = async (type: string) => {
        const res = await fetch(`${system.url}/v2/embed`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: EMBEDDER, texts, embedding_types: [type] }),
        });
        assert.equal(res.status, 200);
        return (await res.arrayBuffer()).byteLength;
      };
      const [float, ubinary] = [await bytes('float'), await bytes('ubinary')];
      // The texts come back in both: the vectors are what differ.
      const textBytes = Buffer.byteLength(JSON.stringify(texts));
      const ratio = (float - textBytes) / (ubinary - textBytes);
      console.log(
        `ubinary: ${ubinary} bytes; float: ${float} bytes; ${(float / ubinary).toFixed(1)}× the whole answer, ${ratio.toFixed(1)}× the vectors`,
      );
      assert.ok(float / ubinary >= 20, `${float} / ${ubinary} = ${float / ubinary}`);
    });
  });

  describe('managed platforms', () => {
    it("GET /ping and Vertex AI's health route answer as /ready does", async () => {
      const ready = await fetch(`${platform.url}/ready`);
      for (const url of [`${system.url}/ping`, `${platform.url}/ping`, `${platform.url}/vertex/health`]) {
        const res = await fetch(url);
        assert.equal(res.status, ready.status, url);
        assert.equal(res.status, 200);
        assert.equal(((await res.json()) as { status: string }).status, 'ready');
      }
      // The route AIP_HEALTH_ROUTE names is no route on a gateway without it.
      assert.equal((await fetch(`${system.url}/vertex/health`)).status, 404);
    });

    it("POST /invocations runs the default model's own route, as TEI binds it by the model's type", async () => {
      // An embedding model: /embed.
      const vectors = await ok(system, '/invocations', { inputs: TEXTS, embedding_type: 'ubinary' });
      assert.deepEqual(vectors, numpyReference(await embed(TEXTS)).ubinary);
      // A reranker: /rerank.
      const body = { query: TEXTS[0], texts: TEXTS.slice(1) };
      assert.deepEqual(
        await ok(platform, '/invocations', body),
        await ok(system, '/rerank', { ...body, model: RERANKER }),
      );
      // A classifier: /predict.
      assert.deepEqual(
        await ok(rooted, '/invocations', { inputs: TEXTS[0] }),
        await ok(system, '/predict', { inputs: TEXTS[0], model: CLASSIFIER }),
      );
      // Errors are the route's own (TEI's), and several models without DEFAULT_MODEL is a 400.
      const bad = await platform.post('/invocations', { query: 'q', texts: [] });
      assert.equal(bad.status, 400, JSON.stringify(bad.body));
      assert.equal(bad.body.error_type, 'Empty');
      const several = new TestSystem(system.prefix, undefined, common);
      try {
        await several.startGateway();
        const res = await several.post('/invocations', { inputs: 'x' });
        assert.equal(res.status, 400, JSON.stringify(res.body));
        assert.match(res.body.error, /several models are served/);
      } finally {
        // Its process alone: the prefix, which stop() would clean, is the other gateways' too.
        await several.gateway?.stop();
      }
    });

    it("Vertex AI's predict route (AIP_PREDICT_ROUTE, and /vertex): each instance a TEI body, on AIP_HTTP_PORT", async () => {
      const instances = [
        { inputs: TEXTS[0], model: EMBEDDER },
        { inputs: TEXTS.slice(1), model: EMBEDDER, embedding_type: 'int8' },
        { query: TEXTS[0], texts: TEXTS.slice(1) },
        { inputs: TEXTS[2], model: CLASSIFIER },
      ];
      const expected = [
        await embed([TEXTS[0]]),
        await embed(TEXTS.slice(1), { embedding_type: 'int8' }),
        await ok(system, '/rerank', { query: TEXTS[0], texts: TEXTS.slice(1), model: RERANKER }),
        await ok(system, '/predict', { inputs: TEXTS[2], model: CLASSIFIER }),
      ];
      for (const route of ['/vertex/predict', '/vertex']) {
        const res = await platform.post(route, { instances, parameters: { anything: 1 } });
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assertClose(res.body.predictions[0], expected[0], 1e-6, `${route} 0`);
        assert.deepEqual(res.body.predictions.slice(1), expected.slice(1), route);
        assert.equal(res.headers.get('x-ignored-fields'), 'parameters');
      }
      for (const [body, message] of [
        [{ instances: [] }, /^instances: must not be empty$/],
        [
          {
            instances: [
              { inputs: 'x', model: EMBEDDER },
              { inputs: 5, model: EMBEDDER },
            ],
          },
          /^instances\.1: inputs: inputs must be a string or a list of strings$/,
        ],
      ] as const) {
        const res = await platform.post('/vertex/predict', body);
        assert.equal(res.status, 422, JSON.stringify(res.body));
        assert.equal(res.body.error_type, 'Validation');
        assert.match(res.body.error, message);
      }
    });
  });

  describe('ROOT_PATH', () => {
    const origin = () => `http://127.0.0.1:${rooted.port}`;
    /** A concrete path of each documented route, with what to send it. */
    const operations = async () => {
      const doc = (await (await fetch(`${rooted.url}/openapi.json`)).json()) as {
        servers?: Array<{ url: string }>;
        paths: Record<string, Record<string, unknown>>;
      };
      assert.deepEqual(doc.servers, [{ url: '/tserve' }]);
      return Object.entries(doc.paths).flatMap(([template, item]) =>
        Object.keys(item).map((method) => ({
          method: method.toUpperCase(),
          path: template.replace('{model}', EMBEDDER).replace(/\{[^}]+\}/g, 'x'),
        })),
      );
    };
    const send = (url: string, method: string) =>
      fetch(url, {
        method,
        ...(method === 'GET' || method === 'HEAD' || method === 'DELETE'
          ? {}
          : { headers: { 'content-type': 'application/json' }, body: '{}' }),
      });

    it('every documented route answers under the prefix, and none outside it', async () => {
      const ops = await operations();
      assert.ok(ops.length > 50, `${ops.length} operations`);
      for (const { method, path: route } of ops) {
        const inside = await send(`${rooted.url}${route}`, method);
        const text = await inside.text();
        assert.ok(!/no route for|every route is under/.test(text), `${method} /tserve${route}: ${text.slice(0, 200)}`);
        const outside = await send(`${origin()}${route}`, method);
        assert.equal(outside.status, 404, `${method} ${route} outside the prefix`);
        assert.match(await outside.text(), /every route is under \/tserve \(ROOT_PATH\)/);
      }
      // A path that only starts like the prefix is outside it.
      assert.equal((await fetch(`${origin()}/tserveX/health`)).status, 404);
      assert.equal((await fetch(`${rooted.url}?x=1`)).status, 404, 'the prefix alone is POST / only');
    });

    it('the Ollama and Cohere clients, and /invocations, work under the prefix', async () => {
      const answer = await new Ollama({ host: rooted.url }).embed({ model: 'nomic-embed-text', input: TEXTS });
      assertClose(answer.embeddings, await embed(TEXTS), 1e-6, 'ollama under /tserve');
      const cohere = new CohereClientV2({ token: 'unused', baseUrl: rooted.url, maxRetries: 0 });
      const byType = await cohere.embed({
        model: EMBEDDER,
        texts: TEXTS,
        inputType: 'search_query',
        embeddingTypes: ['ubinary'],
      });
      assert.deepEqual(byType.embeddings.ubinary, numpyReference(await embed(TEXTS, { prompt_name: 'query' })).ubinary);
    });

    it('/docs and its assets, and the dashboard and its assets, are served under the prefix', async () => {
      const page = await fetch(`${rooted.url}/docs`);
      assert.equal(page.status, 200);
      const html = await page.text();
      const assets = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => new URL(m[1], `${rooted.url}/docs`));
      assert.ok(assets.length >= 3, html);
      for (const url of assets) {
        assert.ok(url.pathname.startsWith('/tserve/docs/'), url.pathname);
        assert.equal((await fetch(url)).status, 200, url.pathname);
      }
      // /docs/ sends the browser to /docs, where the page's relative addresses hold.
      const slash = await fetch(`${rooted.url}/docs/`, { redirect: 'manual' });
      assert.equal(slash.status, 301);
      assert.equal(new URL(slash.headers.get('location')!, `${rooted.url}/docs/`).pathname, '/tserve/docs');
      const authorization = `Bearer ${DASHBOARD_TOKEN}`;
      const board = await fetch(`${rooted.url}/admin/queues`, { headers: { authorization } });
      assert.equal(board.status, 200);
      const boardHtml = await board.text();
      const absolute = [...boardHtml.matchAll(/(?:src|href)="(\/[^"/][^"]*)"/g)].map((m) => m[1]);
      assert.ok(absolute.length > 0, boardHtml.slice(0, 500));
      for (const pathname of absolute) {
        assert.ok(pathname.startsWith('/tserve/admin/queues'), pathname);
        assert.equal((await fetch(`${origin()}${pathname}`, { headers: { authorization } })).status, 200, pathname);
      }
      const api = await fetch(`${rooted.url}/admin/queues/api/queues`, { headers: { authorization } });
      assert.equal(api.status, 200);
      assert.equal((await fetch(`${origin()}/admin/queues`, { headers: { authorization } })).status, 404);
      // A browser's token login sets its cookie for the dashboard under the prefix.
      const login = await fetch(`${rooted.url}/admin/queues?token=${DASHBOARD_TOKEN}`, { redirect: 'manual' });
      assert.equal(login.status, 303);
      assert.match(login.headers.get('set-cookie') ?? '', /Path=\/tserve\/admin\/queues/);
      assert.equal(login.headers.get('location'), '/tserve/admin/queues');
    });

    it("a batch's lines go to the routes under the prefix", async () => {
      const boundary = 'tserve-test-boundary';
      const line = JSON.stringify({
        custom_id: 'a',
        method: 'POST',
        url: '/v1/embeddings',
        body: { model: EMBEDDER, input: TEXTS[0] },
      });
      const part = (disposition: string, body: string) =>
        `--${boundary}\r\nContent-Disposition: form-data; ${disposition}\r\n\r\n${body}\r\n`;
      const file = await fetch(`${rooted.url}/v1/files`, {
        method: 'POST',
        headers: { 'content-type': `multipart/form-data; boundary=${boundary}` },
        body: `${part('name="file"; filename="input.jsonl"', line)}${part('name="purpose"', 'batch')}--${boundary}--\r\n`,
      });
      assert.equal(file.status, 200);
      const { id: inputFileId } = (await file.json()) as { id: string };
      const created = await rooted.post('/v1/batches', {
        input_file_id: inputFileId,
        endpoint: '/v1/embeddings',
        completion_window: '24h',
      });
      assert.equal(created.status, 200, JSON.stringify(created.body));
      const done = await waitFor(
        'the batch to complete',
        async () => {
          const batch = (await (await fetch(`${rooted.url}/v1/batches/${created.body.id}`)).json()) as any;
          return ['completed', 'failed', 'expired', 'cancelled'].includes(batch.status) && batch;
        },
        60_000,
      );
      assert.equal(done.status, 'completed', JSON.stringify(done));
      assert.deepEqual(done.request_counts, { total: 1, completed: 1, failed: 0 });
      const output = await (await fetch(`${rooted.url}/v1/files/${done.output_file_id}/content`)).text();
      const answer = JSON.parse(output.trim());
      assert.equal(answer.response.status_code, 200);
      assertClose([answer.response.body.data[0].embedding], await embed([TEXTS[0]]), 1e-6, 'batch line');
    });
  });
});
