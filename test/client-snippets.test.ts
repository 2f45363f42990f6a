/**
 * Issue 45: every client's default path is tried. Each Python snippet of docs/clients.md runs as
 * written against a real system, where its packages are installed (PYTHON names the interpreter;
 * a snippet whose packages are missing is skipped, naming them). The requests of the clients that
 * cannot be installed here are replayed as their sources build them, so that their default path
 * is checked whatever is installed.
 */
import { after, before, describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { TestSystem, uniquePrefix } from './helpers/system.ts';
import { DEFAULT_CLASSIFIER, EMBEDDER, RERANKER } from './helpers/replicas.ts';
import { pythonSnippets, runSnippet } from '../scripts/client-snippets.ts';

/** Debian's python3-* packages (numpy) install for the system Python, not for another python3 on the PATH. */
const PYTHON = process.env.PYTHON ?? (fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3');

describe("the client libraries' snippets in docs/clients.md", () => {
  const system = new TestSystem(uniquePrefix('client-snippets'));
  const models = [EMBEDDER, DEFAULT_CLASSIFIER, RERANKER];

  before(async () => {
    await system.startGateway();
    for (const model of models) system.startWorker({ model });
    for (const model of models) await system.waitForWorkers(model);
  });
  after(() => system.stop());

  for (const snippet of pythonSnippets()) {
    it(`${snippet.where}: ${snippet.modules.join(', ')}`, async (t: TestContext) => {
      const outcome = await runSnippet(
        snippet,
        { http: `127.0.0.1:${system.port}`, grpc: `127.0.0.1:${system.grpcPort}` },
        PYTHON,
      );
      if (outcome.status === 'skipped') return t.skip(`not installed for ${PYTHON}: ${outcome.missing.join(', ')}`);
      assert.equal(outcome.status, 'passed', outcome.status === 'failed' ? outcome.output : '');
    });
  }

  describe('their requests, as their sources build them', () => {
    it("LangChain's OpenAIEmbeddings: by default tiktoken's token ids, read as the text they encode; with check_embedding_ctx_length=False, the openai client's base64 request", async () => {
      // "tserve batches requests" in cl100k_base, as tiktoken encodes it.
      const tokens = await system.post('/v1/embeddings', {
        input: [[83, 13570, 45892, 7540]],
        model: EMBEDDER,
        encoding_format: 'base64',
      });
      assert.equal(tokens.status, 200, JSON.stringify(tokens.body));
      const texts = await system.post('/v1/embeddings', {
        input: ['tserve batches requests', 'Paris is in France'],
        model: EMBEDDER,
        encoding_format: 'base64',
      });
      assert.equal(texts.status, 200, JSON.stringify(texts.body));
      const vector = Buffer.from(texts.body.data[1].embedding as string, 'base64');
      assert.equal(vector.length, 384 * 4);
      assert.equal(tokens.body.data[0].embedding, texts.body.data[0].embedding, 'the ids are read as their text');
    });

    it("huggingface_hub's InferenceClient.feature_extraction on a model URL", async () => {
      const res = await system.post(`/models/${EMBEDDER}`, {
        inputs: ['tserve batches requests', 'Paris is in France'],
      });
      assert.equal(res.status, 200);
      assert.deepEqual(
        (res.body as number[][]).map((v) => v.length),
        [384, 384],
      );
    });

    it("llama-index's TextEmbeddingsInference: /embed with truncate and no model", async () => {
      const res = await system.post('/embed', {
        inputs: ['tserve batches requests', 'Paris is in France'],
        truncate: true,
      });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.deepEqual(
        (res.body as number[][]).map((v) => v.length),
        [384, 384],
      );
    });

    it("llama-index's TEI reranker: /rerank with query and texts, answered best first with each text's index (what its fixed releases read)", async () => {
      const texts = ['Berlin is in Germany.', 'Paris is the capital of France.', 'Cats sleep a lot.'];
      const res = await system.post('/rerank', { query: 'What is the capital of France?', texts });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      const ranked = res.body as Array<{ index: number; score: number }>;
      assert.deepEqual(ranked.map((r) => r.index).sort(), [0, 1, 2]);
      assert.deepEqual(
        ranked.map((r) => r.score),
        ranked.map((r) => r.score).sort((a, b) => b - a),
      );
    });
  });
});
