/**
 * Issue 59: sparse vectors (TEI's /embed_sparse) from a sentence-transformers SparseEncoder's
 * folder, matched against ONNX Runtime in Python on the same file; and prompts on every embedding
 * route, each changing the vector exactly as prepending its text does. (/embed_all is in
 * protocols.test.ts, the Cohere rerank routes too.)
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ROOT } from './helpers/processes.ts';
import { TestSystem, uniquePrefix } from './helpers/system.ts';
import { grpcClient, unary } from './helpers/grpc.ts';
import { fp32ModelDir, linkedModelDir } from './helpers/fp32-models.ts';
import { EMBEDDER, FILL_MASK } from './helpers/replicas.ts';

type Sparse = Array<{ index: number; value: number }>;

const TEXTS = ['The soup was cold but the waiter in Paris was friendly.', 'Fine.'];

/** The SPLADE vectors Python computes for `texts` from a model folder (test/helpers/splade-reference.py). */
function pythonReference(folder: string, texts: string[]): Sparse[] {
  const out = execFileSync(
    'python3',
    [path.join(ROOT, 'test/helpers/splade-reference.py'), folder, JSON.stringify(texts)],
    // Some ten thousand entries a text: a replica's random head scores half its vocabulary above zero.
    { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 },
  );
  return JSON.parse(out) as Sparse[];
}

/**
 * Throws unless two sparse vectors agree to `tolerance`: an entry one has and the other lacks may
 * only be one that small (a logit at zero may fall on either side of it).
 */
function assertSparseClose(actual: Sparse, expected: Sparse, tolerance: number, how: string): void {
  const [a, e] = [new Map(actual.map((v) => [v.index, v.value])), new Map(expected.map((v) => [v.index, v.value]))];
  let largest = 0;
  for (const index of new Set([...a.keys(), ...e.keys()]))
    largest = Math.max(largest, Math.abs((a.get(index) ?? 0) - (e.get(index) ?? 0)));
  assert.ok(largest <= tolerance, `${how}: an entry differs by ${largest}`);
  assert.ok(actual.length > 100, `${how}: only ${actual.length} entries`);
  assert.deepEqual(
    actual.map((v) => v.index),
    [...actual.map((v) => v.index)].sort((x, y) => x - y),
    `${how}: entries by index`,
  );
}

describe('sparse vectors (SPLADE)', () => {
  /** The fill-mask replica in fp32, as a SparseEncoder's folder: modules.json naming SpladePooling. */
  const models = fp32ModelDir([FILL_MASK]);
  const folder = path.join(models.dir, FILL_MASK);
  fs.writeFileSync(
    path.join(folder, 'modules.json'),
    JSON.stringify([
      { idx: 0, name: '0', path: '', type: 'sentence_transformers.sparse_encoder.models.MLMTransformer' },
      { idx: 1, name: '1', path: '1_SpladePooling', type: 'sentence_transformers.sparse_encoder.models.SpladePooling' },
    ]),
  );
  fs.mkdirSync(path.join(folder, '1_SpladePooling'));
  fs.writeFileSync(
    path.join(folder, '1_SpladePooling/config.json'),
    JSON.stringify({ pooling_strategy: 'max', activation_function: 'relu', word_embedding_dimension: 30522 }),
  );
  const system = new TestSystem(uniquePrefix('sparse'));

  before(async () => {
    await system.startGateway();
    system.startWorker({ model: FILL_MASK, env: { MODEL_DIR: models.dir, DTYPE: 'fp32' } });
    system.startWorker({ model: EMBEDDER, env: { DTYPE: 'q8' } });
    await system.waitForWorkers(FILL_MASK);
    await system.waitForWorkers(EMBEDDER);
  });
  after(async () => {
    await system.stop();
    models.remove();
  });

  it('/embed_sparse matches ONNX Runtime in Python on the same file (fp32, to 1e-5), alone and batched', async () => {
    const expected = pythonReference(folder, TEXTS);
    const batched = await system.post('/embed_sparse', { inputs: TEXTS });
    assert.equal(batched.status, 200, JSON.stringify(batched.body).slice(0, 500));
    for (const [i, text] of TEXTS.entries()) {
      const alone = await system.post('/embed_sparse', { inputs: text });
      assert.equal(alone.status, 200);
      assertSparseClose(alone.body[0], expected[i], 1e-5, `"${text}" alone`);
      assertSparseClose(batched.body[i], expected[i], 1e-5, `"${text}" batched`);
    }
  });

  it("TEI's gRPC EmbedSparse answers as /embed_sparse does", async () => {
    const tei = grpcClient('tei.v1.Embed', system.grpcPort, 'tei.proto');
    try {
      const answer = await unary(tei, 'EmbedSparse', { inputs: TEXTS[0] });
      const http = await system.post('/embed_sparse', { inputs: TEXTS[0] });
      assert.deepEqual(
        answer.sparse_embeddings,
        (http.body[0] as Sparse).map(({ index, value }) => ({ index, value: Math.fround(value) })),
      );
    } finally {
      tei.close();
    }
  });

  it('/info says splade; a sparse request to a model without a SPLADE head is refused, in TEI’s shape', async () => {
    const info = (await fetch(`${system.url}/info?model=${FILL_MASK}`).then((r) => r.json())) as any;
    assert.deepEqual(info.model_type, { embedding: { pooling: 'splade' } });
    const res = await system.post('/embed_sparse', { inputs: 'hello', model: EMBEDDER });
    assert.equal(res.status, 422, JSON.stringify(res.body));
    assert.equal(res.body.error_type, 'Validation');
    assert.match(res.body.error, /model replica\/all-MiniLM-L6-v2 is not a sparse model/);
  });

  it('POOLING=splade serves sparse vectors from a masked-LM folder that says nothing of pooling', async (t) => {
    // The same files but the sentence-transformers ones.
    const bare = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-models-'));
    fs.mkdirSync(path.join(bare, FILL_MASK), { recursive: true });
    for (const entry of fs.readdirSync(folder))
      if (entry !== 'modules.json' && entry !== '1_SpladePooling')
        fs.symlinkSync(path.join(folder, entry), path.join(bare, FILL_MASK, entry));
    const [plain, forced] = [
      new TestSystem(uniquePrefix('sparse-none')),
      new TestSystem(uniquePrefix('sparse-setting')),
    ];
    t.after(async () => {
      await Promise.all([plain.stop(), forced.stop()]);
      fs.rmSync(bare, { recursive: true, force: true });
    });
    await Promise.all([plain.startGateway(), forced.startGateway()]);
    plain.startWorker({ model: FILL_MASK, env: { MODEL_DIR: bare, DTYPE: 'fp32' } });
    forced.startWorker({ model: FILL_MASK, env: { MODEL_DIR: bare, DTYPE: 'fp32', POOLING: 'splade' } });
    await Promise.all([plain.waitForWorkers(FILL_MASK), forced.waitForWorkers(FILL_MASK)]);
    // Without the setting, a masked-LM model is only that.
    const refused = await plain.post('/embed_sparse', { inputs: TEXTS[0], model: FILL_MASK });
    assert.equal(refused.status, 422, JSON.stringify(refused.body));
    assert.match(refused.body.error, /is not a sparse model/);
    const res = await forced.post('/embed_sparse', { inputs: TEXTS[0] });
    assert.equal(res.status, 200);
    assertSparseClose(res.body[0], pythonReference(folder, [TEXTS[0]])[0], 1e-5, 'POOLING=splade');
  });
});

describe('prompts', () => {
  const PROMPTS = { query: 'query: ', passage: 'passage: ' };
  /** The embedder with named prompts; and the same files as a model whose default prompt is "query". */
  const WITH_DEFAULT = `${EMBEDDER}-query`;
  const models = linkedModelDir([EMBEDDER]);
  fs.writeFileSync(
    path.join(models.dir, EMBEDDER, 'config_sentence_transformers.json'),
    JSON.stringify({ prompts: PROMPTS, default_prompt_name: null, similarity_fn_name: 'cosine' }),
  );
  fs.cpSync(path.join(models.dir, EMBEDDER), path.join(models.dir, WITH_DEFAULT), {
    recursive: true,
    verbatimSymlinks: true,
  });
  fs.writeFileSync(
    path.join(models.dir, WITH_DEFAULT, 'config_sentence_transformers.json'),
    JSON.stringify({ prompts: PROMPTS, default_prompt_name: 'query' }),
  );
  const system = new TestSystem(uniquePrefix('prompts'), undefined, { MODEL_DIR: models.dir });
  const TEXT = 'How many people live in Berlin?';

  before(async () => {
    await system.startGateway();
    // q8 is exact here: each input runs alone, prompted or prepended the same.
    for (const model of [EMBEDDER, WITH_DEFAULT]) system.startWorker({ model, env: { DTYPE: 'q8' } });
    for (const model of [EMBEDDER, WITH_DEFAULT]) await system.waitForWorkers(model);
  });
  after(async () => {
    await system.stop();
    models.remove();
  });

  const ok = async (pathname: string, body: unknown) => {
    const res = await system.post(pathname, body);
    assert.equal(res.status, 200, `${pathname}: ${JSON.stringify(res.body).slice(0, 300)}`);
    return res.body;
  };

  it('prompt_name changes the vector exactly as prepending its text does, on every embedding route', async () => {
    const prepended = (await ok('/embed', { inputs: `query: ${TEXT}`, model: EMBEDDER }))[0];
    const plain = (await ok('/embed', { inputs: TEXT, model: EMBEDDER }))[0];
    assert.notDeepEqual(plain, prepended);
    const routes: Array<[string, Promise<number[]>]> = [
      ['/embed', ok('/embed', { inputs: TEXT, model: EMBEDDER, prompt_name: 'query' }).then((b) => b[0])],
      [
        '/v1/embeddings',
        ok('/v1/embeddings', { input: TEXT, model: EMBEDDER, prompt_name: 'query' }).then((b) => b.data[0].embedding),
      ],
      [
        '/models/<id>',
        ok(`/models/${EMBEDDER}`, { inputs: TEXT, parameters: { prompt_name: 'query' } }).then((b) => b),
      ],
    ];
    for (const [route, answer] of routes) assert.deepEqual(await answer, prepended, route);
    const all = await ok('/embed_all', { inputs: TEXT, model: EMBEDDER, prompt_name: 'query' });
    assert.deepEqual(all, await ok('/embed_all', { inputs: `query: ${TEXT}`, model: EMBEDDER }));
  });

  it('/tokenize counts the prompt as the model sees it; offsets still count into the text sent', async () => {
    const [prompted] = await ok('/tokenize', { inputs: TEXT, model: EMBEDDER, prompt_name: 'passage' });
    const [prepended] = await ok('/tokenize', { inputs: `passage: ${TEXT}`, model: EMBEDDER });
    const shift = 'passage: '.length;
    assert.deepEqual(
      prompted,
      prepended.map((t: { start: number | null; stop: number | null }) =>
        t.start === null || t.start < shift
          ? { ...t, start: null, stop: null }
          : { ...t, start: t.start - shift, stop: t.stop! - shift },
      ),
    );
    // [CLS] passage : how …: the prompt's two tokens are the model's, not the text's.
    assert.deepEqual(
      prompted.slice(0, 4).map((t: { text: string; start: number | null }) => [t.text, t.start]),
      [
        ['[CLS]', null],
        ['passage', null],
        [':', null],
        ['How', 0],
      ],
    );
  });

  it("the model's default prompt goes before an input that names none; null is the default", async () => {
    const prepended = (await ok('/embed', { inputs: `query: ${TEXT}`, model: EMBEDDER }))[0];
    assert.deepEqual((await ok('/embed', { inputs: TEXT, model: WITH_DEFAULT }))[0], prepended);
    assert.deepEqual((await ok('/embed', { inputs: TEXT, model: WITH_DEFAULT, prompt_name: null }))[0], prepended);
    const passage = (await ok('/embed', { inputs: `passage: ${TEXT}`, model: EMBEDDER }))[0];
    assert.deepEqual((await ok('/embed', { inputs: TEXT, model: WITH_DEFAULT, prompt_name: 'passage' }))[0], passage);
  });

  it('DEFAULT_PROMPT sets the default prompt of a model whose folder names none', async (t) => {
    const other = new TestSystem(uniquePrefix('prompts-setting'), undefined, { MODEL_DIR: models.dir });
    t.after(() => other.stop());
    await other.startGateway();
    other.startWorker({ model: EMBEDDER, env: { DTYPE: 'q8', DEFAULT_PROMPT: 'passage: ' } });
    await other.waitForWorkers(EMBEDDER);
    const res = await other.post('/embed', { inputs: TEXT });
    assert.equal(res.status, 200);
    assert.deepEqual(res.body[0], (await ok('/embed', { inputs: `passage: ${TEXT}`, model: EMBEDDER }))[0]);
  });

  it('an unknown prompt name is refused, naming the known ones, in each protocol’s shape', async () => {
    const known = /prompt_name "nope" is not one of model replica\/all-MiniLM-L6-v2's prompts: query, passage/;
    const tei = await system.post('/embed', { inputs: TEXT, model: EMBEDDER, prompt_name: 'nope' });
    assert.equal(tei.status, 422);
    assert.match(tei.body.error, known);
    const openai = await system.post('/v1/embeddings', { input: TEXT, model: EMBEDDER, prompt_name: 'nope' });
    assert.equal(openai.status, 400);
    assert.match(openai.body.error.message, known);
    const hf = await system.post(`/models/${EMBEDDER}`, { inputs: TEXT, parameters: { prompt_name: 'nope' } });
    assert.equal(hf.status, 400);
    assert.match(hf.body.error, known);
  });
});
