/**
 * Issue 84: the models people pick, served as sentence-transformers and the transformers pipelines
 * serve them, from their own folders: pooling (CLS, last token, mean), a Dense head inside the ONNX
 * graph, prompts, a decoder's left padding, truncation at max_seq_length with the special tokens
 * kept, pairs cut longest-first (rerankers) and only-first (zero-shot), and an NLI head whose labels
 * are entailment / not_entailment. Every replica and case of REFERENCE-families.json, each input
 * alone, over each route: the q8 files against the reference's q8 column (ONNX Runtime, the same
 * file) to cosine 0.9999, the fp32 files against sentence-transformers on torch to 0.99999 (scores to
 * 1e-4). Inputs and folders the references do not hold (a very long text, every pooling mode,
 * include_prompt, do_lower_case) against Python (tokenizers and ONNX Runtime, helpers/family-reference.py).
 * An export that declares past key values is fed empty ones; where int8 per row cannot be written,
 * DTYPE=auto says so; a folder that asks for what cannot be served fails its load, naming the module.
 */
import { after, before, describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { linkedModelDir } from './helpers/fp32-models.ts';
import {
  BGE,
  BGE_RERANKER,
  DEBERTA_NLI,
  E5,
  EMBEDDERS,
  FAMILIES,
  GEMMA,
  GTE,
  QWEN3,
  cosine,
  editedReplica,
  familyReference,
  type EmbeddingCase,
  type RerankCase,
  type ZeroShotCase,
} from './helpers/families.ts';
import { HubMirror } from './helpers/hub-mirror.ts';
import { MODEL_DIR, ROOT, TestSystem, uniquePrefix, type Proc } from './helpers/system.ts';

const REF = familyReference();
const Q8_COSINE = 0.9999;
const FP32_COSINE = 0.99999;
const SCORE_TOLERANCE = 1e-4;
/** The models whose fp32 file the shared folder ships. */
const FP32 = [GTE, DEBERTA_NLI];

type System = TestSystem;
const embeddingCases = (model: string) => REF[model].cases as EmbeddingCase[];

/** Each embedding route, as a function from one text (and its prompt's name) to its embedding. */
const ROUTES: Array<{
  name: string;
  embed: (s: System, model: string, text: string, prompt?: string) => Promise<any>;
}> = [
  {
    name: 'OpenAI /v1/embeddings',
    embed: async (s, model, text, prompt) =>
      (await ok(s, '/v1/embeddings', { model, input: [text], ...(prompt ? { prompt_name: prompt } : {}) })).data[0]
        .embedding,
  },
  {
    name: 'TEI /embed',
    embed: async (s, model, text, prompt) =>
      (await ok(s, '/embed', { model, inputs: [text], ...(prompt ? { prompt_name: prompt } : {}) }))[0],
  },
  {
    name: 'Inference API /models/<id>',
    embed: (s, model, text, prompt) =>
      ok(s, `/models/${model}`, { inputs: text, ...(prompt ? { parameters: { prompt_name: prompt } } : {}) }),
  },
];

async function ok(s: System, pathname: string, body: unknown): Promise<any> {
  const res = await s.post(pathname, body);
  assert.equal(res.status, 200, `${pathname}: ${JSON.stringify(res.body)}`);
  return res.body;
}

/** The worker must fail its load: its output, which says why. */
async function failedLoad(worker: Proc): Promise<string> {
  const code = await worker.exited;
  assert.notEqual(code, 0, `the worker loaded:\n${worker.output}`);
  return worker.output;
}

function assertClose(actual: number[], expected: number[], tolerance: number, what: string): void {
  const largest = Math.max(...actual.map((v, i) => Math.abs(v - expected[i])));
  assert.ok(actual.length === expected.length && largest <= tolerance, `${what}: differs by ${largest}`);
}

/** sentence-transformers' embeddings of `texts` from a model folder, computed in Python (test/helpers/family-reference.py). */
function pythonReference(folder: string, texts: string[], prompt = ''): Array<{ ids: number[]; embedding: number[] }> {
  const script = path.join(ROOT, 'test/helpers/family-reference.py');
  return JSON.parse(
    execFileSync('python3', [script, folder, JSON.stringify(texts), prompt], {
      encoding: 'utf8',
      maxBuffer: 64 * 2 ** 20,
    }),
  ) as Array<{ ids: number[]; embedding: number[] }>;
}

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));
/** One label scored alone, as the pipeline scores it (entailment against not_entailment), from the reference's logits. */
const aloneScore = ([entailment, notEntailment]: number[]) => sigmoid(entailment - notEntailment);

describe('the families people pick, as sentence-transformers serves them', () => {
  const q8Models = linkedModelDir(FAMILIES, { q8Only: true });
  const fp32Models = linkedModelDir(FP32);
  const q8 = new TestSystem(uniquePrefix('families-q8'), undefined, { MODEL_DIR: q8Models.dir });
  const fp32 = new TestSystem(uniquePrefix('families-fp32'), undefined, { MODEL_DIR: fp32Models.dir });
  /** Folders made for one test, and the systems that serve them. */
  const scratch: Array<{ remove: () => void }> = [];
  const extra: TestSystem[] = [];

  /** A system serving `model` from `dir`, its worker started with `env`. */
  async function serve(dir: string, model: string, env: Record<string, string> = {}): Promise<TestSystem> {
    const s = new TestSystem(uniquePrefix('families-edited'), undefined, { MODEL_DIR: dir });
    extra.push(s);
    await s.startGateway();
    s.startWorker({ model, env: { DTYPE: 'q8', ...env } });
    await s.waitForWorkers(model);
    return s;
  }

  before(async () => {
    await Promise.all([q8.startGateway(), fp32.startGateway()]);
    for (const model of FAMILIES) q8.startWorker({ model, env: { DTYPE: 'q8' } });
    for (const model of FP32) fp32.startWorker({ model, env: { DTYPE: 'fp32' } });
    for (const model of FAMILIES) await q8.waitForWorkers(model);
    for (const model of FP32) await fp32.waitForWorkers(model);
  });
  after(async () => {
    await Promise.all([q8, fp32, ...extra].map((s) => s.stop()));
    for (const folder of [q8Models, fp32Models, ...scratch]) folder.remove();
  });

  for (const model of EMBEDDERS) {
    for (const route of ROUTES) {
      it(`${model}, ${route.name}: each case alone equals the reference, prompts included`, async (t: TestContext) => {
        let least = 1;
        let leastExact = 1;
        for (const c of embeddingCases(model)) {
          const vector = (await route.embed(q8, model, c.text, c.prompt_name ?? undefined)) as number[];
          assert.equal(vector.length, c.embedding_q8.length, `${c.text}: dimensions`);
          const similarity = cosine(vector, c.embedding_q8);
          least = Math.min(least, similarity);
          assert.ok(similarity >= Q8_COSINE, `q8 "${c.text}" (${c.prompt_name}): cosine ${similarity}`);
          if (FP32.includes(model)) {
            const exact = cosine(
              (await route.embed(fp32, model, c.text, c.prompt_name ?? undefined)) as number[],
              c.embedding,
            );
            assert.ok(exact >= FP32_COSINE, `fp32 "${c.text}" (${c.prompt_name}): cosine ${exact}`);
            leastExact = Math.min(leastExact, exact);
          }
        }
        t.diagnostic(
          `${model} ${route.name}: least cosine to the q8 reference ${least.toFixed(7)}` +
            (FP32.includes(model) ? `, fp32 to sentence-transformers on torch ${leastExact.toFixed(7)}` : ''),
        );
      });
    }
  }

  it("/tokenize with each case's prompt gives the reference's input_ids: prompt, text and template", async () => {
    for (const model of EMBEDDERS) {
      for (const c of embeddingCases(model)) {
        const tokens = (await ok(q8, '/tokenize', {
          model,
          inputs: c.text,
          ...(c.prompt_name ? { prompt_name: c.prompt_name } : {}),
        })) as Array<Array<{ id: number }>>;
        assert.deepEqual(
          tokens[0].map((token) => token.id),
          c.input_ids,
          `${model} "${c.text}"`,
        );
      }
    }
  });

  it('/info says how each embedder pools, which head and length it has, and its prompts', async () => {
    const expected: Record<string, { pooling: string; dense: string[]; length: number; padding: string }> = {
      [BGE]: { pooling: 'cls', dense: [], length: 512, padding: 'right' },
      [QWEN3]: { pooling: 'last_token', dense: [], length: 8192, padding: 'left' },
      [GEMMA]: { pooling: 'mean', dense: ['2_Dense', '3_Dense'], length: 2048, padding: 'right' },
      [E5]: { pooling: 'mean', dense: [], length: 512, padding: 'right' },
      [GTE]: { pooling: 'cls', dense: [], length: 8192, padding: 'right' },
    };
    for (const model of EMBEDDERS) {
      const info = (await (await fetch(`${q8.url}/info?model=${model}`)).json()) as any;
      const want = expected[model];
      assert.deepEqual(info.model_type, { embedding: { pooling: want.pooling } }, model);
      assert.equal(info.max_input_length, want.length, model);
      assert.equal(info.task, 'feature-extraction', model);
      assert.deepEqual(info.sentence_transformers.dense, want.dense, model);
      assert.equal(info.sentence_transformers.normalize, true, model);
      assert.equal(info.sentence_transformers.padding_side, want.padding, model);
      const prompts = Object.fromEntries(
        embeddingCases(model)
          .filter((c) => c.prompt_name)
          .map((c) => [c.prompt_name, c.prompt]),
      );
      for (const [name, prompt] of Object.entries(prompts))
        assert.equal(info.sentence_transformers.prompts[name], prompt);
    }
  });

  it("a request's own pooling wins: mean on a CLS model; on a Dense head its own pooling or none, else a 400 naming it", async () => {
    const text = embeddingCases(BGE)[2].text;
    const tokens = (await ok(q8, '/embed_all', { model: BGE, inputs: [text] }))[0] as number[][];
    const mean = tokens[0].map((_, j) => tokens.reduce((sum, v) => sum + v[j], 0) / tokens.length);
    const asked = (await ok(q8, `/models/${BGE}`, { inputs: text, parameters: { pooling: 'mean' } })) as number[];
    assert.ok(cosine(asked, mean) > 0.999999, 'pooling "mean" is the mean of the token vectors');
    assert.ok(cosine(asked, embeddingCases(BGE)[2].embedding_q8) < 0.999, "and not the model's CLS pooling");
    const own = (await ok(q8, `/models/${GEMMA}`, { inputs: text, parameters: { pooling: 'mean' } })) as number[];
    const plain = (await ok(q8, `/models/${GEMMA}`, { inputs: text })) as number[];
    assert.deepEqual(own, plain);
    const refused = await q8.infer(GEMMA, text, { pooling: 'cls' });
    assert.equal(refused.status, 400, JSON.stringify(refused.body));
    assert.match(refused.body.error, /Dense head \(2_Dense, 3_Dense\).*pooling "cls" cannot be served/);
  });

  it("the Inference API's sentence-similarity pools as the model does: CLS for bge, last token for Qwen3", async () => {
    for (const model of [BGE, QWEN3]) {
      const [source, other] = embeddingCases(model).filter((c) => c.prompt_name === null);
      const [score] = (await ok(q8, `/models/${model}`, {
        inputs: { source_sentence: source.text, sentences: [other.text] },
      })) as number[];
      // The two run in one q8 call, whose activations are quantized together: close, not exact.
      const expected = cosine(source.embedding_q8, other.embedding_q8);
      assert.ok(Math.abs(score - expected) <= 2e-3, `${model}: ${score} vs ${expected} from the references`);
    }
  });

  it(`${BGE_RERANKER}: TEI /rerank and Cohere's /v2/rerank score each pair as the reference, and rank as it does`, async () => {
    for (const c of REF[BGE_RERANKER].cases as RerankCase[]) {
      for (const r of c.results) {
        const document = c.documents[r.index];
        const [tei] = (await ok(q8, '/rerank', {
          model: BGE_RERANKER,
          query: c.query,
          texts: [document],
          raw_scores: true,
        })) as Array<{ score: number }>;
        assert.ok(Math.abs(tei.score - r.logit_q8) <= SCORE_TOLERANCE, `/rerank logit ${tei.score} vs ${r.logit_q8}`);
        const cohere = await ok(q8, '/v2/rerank', { model: BGE_RERANKER, query: c.query, documents: [document] });
        const score = cohere.results[0].relevance_score as number;
        assert.ok(Math.abs(score - r.score_q8) <= SCORE_TOLERANCE, `/v2/rerank score ${score} vs ${r.score_q8}`);
      }
      const ranked = (await ok(q8, '/rerank', { model: BGE_RERANKER, query: c.query, texts: c.documents })) as Array<{
        index: number;
      }>;
      assert.deepEqual(
        ranked.map((r) => r.index),
        (c as unknown as { ranking_q8: number[] }).ranking_q8,
      );
    }
  });

  it(`${DEBERTA_NLI}: zero-shot with entailment / not_entailment labels scores as the pipeline, single- and multi-label`, async () => {
    for (const c of REF[DEBERTA_NLI].cases as ZeroShotCase[]) {
      const parameters = {
        candidate_labels: c.candidate_labels,
        multi_label: c.multi_label,
        hypothesis_template: c.hypothesis_template,
      };
      // fp32: the whole request, its pairs batched, against the pipeline on torch.
      const body = await ok(fp32, `/models/${DEBERTA_NLI}`, { inputs: c.sequence, parameters });
      assert.deepEqual(body.labels, c.labels);
      body.scores.forEach((score: number, i: number) =>
        assert.ok(Math.abs(score - c.scores[i]) <= SCORE_TOLERANCE, `${c.labels[i]}: ${score} vs ${c.scores[i]}`),
      );
      // q8: each label alone (a q8 answer shifts with its batch mates), against the reference's q8 logits.
      for (const pair of c.pairs) {
        const alone = await ok(q8, `/models/${DEBERTA_NLI}`, {
          inputs: c.sequence,
          parameters: { ...parameters, candidate_labels: [pair.label] },
        });
        const want = aloneScore(pair.logits_q8);
        assert.ok(
          Math.abs(alone.scores[0] - want) <= SCORE_TOLERANCE,
          `${pair.label} alone: ${alone.scores[0]} vs ${want}`,
        );
      }
    }
  });

  it(`${QWEN3}: last-token pooling answers the same with the tokenizer's left padding and with right padding, alone and batched`, async (t: TestContext) => {
    // int8-row, whose answers do not depend on batch mates: q8 quantizes a call's activations as one
    // tensor, padding included, so its batched answers shift whatever the padding.
    const left = editedReplica(QWEN3, {}, { onnx: ['model_quantized.onnx'] });
    const right = editedReplica(
      QWEN3,
      { 'tokenizer_config.json': (json) => ({ ...json, padding_side: 'right' }) },
      { onnx: ['model_quantized.onnx'] },
    );
    scratch.push(left, right);
    const cases = embeddingCases(QWEN3).filter((c) => c.prompt_name === null);
    const texts = cases.map((c) => c.text);
    const answers: number[][][] = [];
    for (const [side, folder] of [
      ['left', left],
      ['right', right],
    ] as const) {
      const s = await serve(folder.dir, QWEN3, { DTYPE: 'int8-row' });
      const info = (await (await fetch(`${s.url}/info?model=${QWEN3}`)).json()) as any;
      assert.equal(info.sentence_transformers.padding_side, side);
      const alone: number[][] = [];
      for (const text of texts)
        alone.push(((await ok(s, '/embed', { model: QWEN3, inputs: [text] })) as number[][])[0]);
      const batched = (await ok(s, '/embed', { model: QWEN3, inputs: texts })) as number[][];
      alone.forEach((v, i) => assertClose(batched[i], v, 1e-5, `${side} padding, "${texts[i]}" batched vs alone`));
      const least = Math.min(...alone.map((v, i) => cosine(v, cases[i].embedding_q8)));
      t.diagnostic(`${side} padding, int8-row: least cosine to the q8 reference ${least.toFixed(5)}`);
      assert.ok(least >= 0.99, `${side} padding: int8-row against the q8 reference, cosine ${least}`);
      answers.push(alone);
      await s.stop();
    }
    answers[0].forEach((v, i) => assertClose(answers[1][i], v, 1e-5, `"${texts[i]}" left vs right padding`));
  });

  it(`${QWEN3}: an export that declares past key values (as text-generation exports do) is fed empty ones`, async () => {
    const folder = editedReplica(QWEN3, {}, { onnx: [] });
    scratch.push(folder);
    const python = fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
    const config = JSON.parse(fs.readFileSync(path.join(MODEL_DIR, QWEN3, 'config.json'), 'utf8'));
    execFileSync(python, [
      path.join(ROOT, 'test/helpers/with-past-inputs.py'),
      path.join(MODEL_DIR, QWEN3, 'onnx/model_quantized.onnx'),
      path.join(folder.dir, QWEN3, 'onnx/model_quantized.onnx'),
      String(config.num_hidden_layers),
      String(config.num_key_value_heads),
      String(config.head_dim),
    ]);
    const s = await serve(folder.dir, QWEN3);
    for (const c of embeddingCases(QWEN3)) {
      const [vector] = (await ok(s, '/embed', {
        model: QWEN3,
        inputs: [c.text],
        ...(c.prompt_name ? { prompt_name: c.prompt_name } : {}),
      })) as number[][];
      assert.ok(cosine(vector, c.embedding_q8) >= Q8_COSINE, `"${c.text}"`);
    }
    await s.stop();
  });

  it('an over-long input is cut as sentence-transformers cuts it: at max_seq_length, its special tokens kept', async () => {
    for (const model of EMBEDDERS) {
      // A case that runs with a prompt where the model has prompts: the prompt is cut with the text.
      const c = embeddingCases(model).find((k) => k.prompt) ?? embeddingCases(model)[3];
      const cut = editedReplica(
        model,
        { 'sentence_bert_config.json': (json) => ({ ...json, max_seq_length: c.n_tokens }) },
        { onnx: ['model_quantized.onnx'] },
      );
      scratch.push(cut);
      const s = await serve(cut.dir, model);
      const longer = `${c.text} and then it went on for a good many more words than the model was told to read`;
      const res = await s.post('/v1/embeddings', {
        model,
        input: [longer],
        ...(c.prompt_name ? { prompt_name: c.prompt_name } : {}),
      });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      const similarity = cosine(res.body.data[0].embedding, c.embedding_q8);
      assert.ok(similarity >= Q8_COSINE, `${model}: cut to ${c.n_tokens} tokens, cosine ${similarity} to "${c.text}"`);
      assert.equal(res.body.usage.prompt_tokens, c.n_tokens, model);
      await s.stop();
    }
  });

  it('an over-long pair is cut longest-first for a reranker, only-first for zero-shot', async () => {
    // The longest document: the query (14 tokens) is under half the length, so longest-first cuts
    // the document alone (tokenizers cuts both to about half where the shorter is past it).
    const rerank = (REF[BGE_RERANKER].cases as RerankCase[])[0];
    const pair = rerank.results[0];
    const shortReranker = editedReplica(BGE_RERANKER, {
      'tokenizer_config.json': (json) => ({ ...json, model_max_length: pair.n_tokens }),
    });
    scratch.push(shortReranker);
    const r = await serve(shortReranker.dir, BGE_RERANKER);
    const document = `${rerank.documents[pair.index]} It has many more museums than anyone could visit in a year.`;
    const [scored] = (await ok(r, '/rerank', {
      model: BGE_RERANKER,
      query: rerank.query,
      texts: [document],
      raw_scores: true,
      truncate: true,
    })) as Array<{ score: number }>;
    assert.ok(
      Math.abs(scored.score - pair.logit_q8) <= SCORE_TOLERANCE,
      `the longer document cut back: ${scored.score} vs ${pair.logit_q8}`,
    );
    await r.stop();

    const zero = (REF[DEBERTA_NLI].cases as ZeroShotCase[])[0];
    const label = zero.pairs[1];
    const shortNli = editedReplica(
      DEBERTA_NLI,
      { 'tokenizer_config.json': (json) => ({ ...json, model_max_length: label.n_tokens }) },
      { onnx: ['model_quantized.onnx'] },
    );
    scratch.push(shortNli);
    const z = await serve(shortNli.dir, DEBERTA_NLI);
    const body = await ok(z, `/models/${DEBERTA_NLI}`, {
      inputs: `${zero.sequence} I have called them three times already and nobody answers the phone.`,
      parameters: { candidate_labels: [label.label], hypothesis_template: zero.hypothesis_template },
    });
    const want = aloneScore(label.logits_q8);
    assert.ok(
      Math.abs(body.scores[0] - want) <= SCORE_TOLERANCE,
      `the sequence cut, the hypothesis whole: ${body.scores[0]} vs ${want}`,
    );
    await z.stop();
  });

  it(`a very long input at the model's own length answers as sentence-transformers does, or is refused by the memory budget`, async (t: TestContext) => {
    const words = 'the museum of the city holds paintings from every century and region';
    const long = Array.from({ length: 200 }, () => words).join(' ');
    const expected = pythonReference(path.join(q8Models.dir, BGE), [long]);
    assert.equal(expected[0].ids.length, 512, 'the reference cuts at max_seq_length');
    const res = await q8.post('/v1/embeddings', { model: BGE, input: [long] });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.usage.prompt_tokens, 512);
    const similarity = cosine(res.body.data[0].embedding, expected[0].embedding);
    t.diagnostic(`${BGE}, ${long.length} characters cut to 512 tokens: cosine ${similarity.toFixed(7)} to Python's`);
    assert.ok(similarity >= Q8_COSINE);

    // Qwen3-Embedding cuts at 8192 tokens: a budget too small for that is said before any call.
    const s = new TestSystem(uniquePrefix('families-budget'), undefined, { MODEL_DIR: q8Models.dir });
    extra.push(s);
    await s.startGateway();
    s.startWorker({ model: QWEN3, env: { DTYPE: 'q8', WORKER_MEMORY_MB: 400 } });
    await s.waitForWorkers(QWEN3);
    const refused = await s.post('/v1/embeddings', {
      model: QWEN3,
      input: [Array.from({ length: 1000 }, () => words).join(' ')],
    });
    assert.equal(refused.status, 413, JSON.stringify(refused.body));
    assert.match(
      JSON.stringify(refused.body),
      /memory budget \(WORKER_MEMORY_MB\) holds model calls of at most \d+ tokens per input/,
    );
    await s.stop();
  });

  it('every pooling mode at once, a prompt left out of the pooling, and do_lower_case, as sentence-transformers computes them', async (t: TestContext) => {
    const modes = ['cls', 'max', 'mean', 'mean_sqrt_len_tokens', 'weightedmean', 'lasttoken'];
    const pooled = editedReplica(
      E5,
      { '1_Pooling/config.json': () => ({ embedding_dimension: 64, pooling_mode: modes, include_prompt: false }) },
      { onnx: ['model_quantized.onnx'] },
    );
    const lower = editedReplica(
      GTE,
      { 'sentence_bert_config.json': (json) => ({ ...json, do_lower_case: true }) },
      { onnx: ['model_quantized.onnx'] },
    );
    scratch.push(pooled, lower);
    const texts = ['What is the Capital of France?', 'Paris is the capital and most populous city of France.'];
    for (const [model, folder, prompt] of [
      [E5, pooled, 'query'],
      [GTE, lower, undefined],
    ] as const) {
      const s = await serve(folder.dir, model);
      const text = prompt ? embeddingCases(model).find((c) => c.prompt_name === prompt)!.prompt! : '';
      const expected = pythonReference(path.join(folder.dir, model), texts, text);
      for (const [i, input] of texts.entries()) {
        const [vector] = (await ok(s, '/embed', {
          model,
          inputs: [input],
          ...(prompt ? { prompt_name: prompt } : {}),
        })) as number[][];
        assert.equal(vector.length, expected[i].embedding.length, `${model}: dimensions`);
        const similarity = cosine(vector, expected[i].embedding);
        t.diagnostic(`${model} "${input}": cosine ${similarity.toFixed(7)} to Python's`);
        assert.ok(similarity >= Q8_COSINE, `${model} "${input}": ${similarity}`);
      }
      await s.stop();
    }
  });

  it('where int8 per row cannot be written from the file, DTYPE=auto runs it as it is and says so: log, /info, the answer right', async () => {
    // A float model under the q8 file's name: the rewrite of a q8 export finds no quantizer in it.
    const folder = editedReplica(GTE, {}, { onnx: [] });
    scratch.push(folder);
    fs.symlinkSync(
      path.join(MODEL_DIR, GTE, 'onnx/model.onnx'),
      path.join(folder.dir, GTE, 'onnx/model_quantized.onnx'),
    );
    const s = new TestSystem(uniquePrefix('families-fallback'), undefined, { MODEL_DIR: folder.dir });
    extra.push(s);
    await s.startGateway();
    const worker = s.startWorker({ model: GTE });
    await s.waitForWorkers(GTE);
    assert.match(worker.output, /int8-row cannot be written from this file; running it as it is/);
    const info = (await (await fetch(`${s.url}/info?model=${GTE}`)).json()) as any;
    assert.equal(info.model_dtype, 'q8');
    assert.match(
      info.model_dtype_fallback,
      /^int8-row cannot be written from onnx\/model_quantized\.onnx \(.+\); it runs as q8$/,
    );
    for (const c of embeddingCases(GTE)) {
      const [vector] = (await ok(s, '/embed', { model: GTE, inputs: [c.text] })) as number[][];
      assert.ok(cosine(vector, c.embedding) >= FP32_COSINE, `"${c.text}": the float file's answer`);
    }
    await s.stop();
  });

  it('a folder that asks for what cannot be served fails its load, naming the module', async () => {
    const cases: Array<{ what: string; folder: { dir: string; remove: () => void }; says: RegExp }> = [
      {
        what: 'a module tserve does not run',
        folder: editedReplica(BGE, {
          'modules.json': (modules: any[]) => [
            ...modules.slice(0, 2),
            { idx: 2, name: '2', path: '2_LayerNorm', type: 'sentence_transformers.models.LayerNorm' },
            ...modules.slice(2),
          ],
        }),
        says: /module 2_LayerNorm \(sentence_transformers\.models\.LayerNorm\) is not served/,
      },
      {
        what: 'Dense modules its ONNX file does not run',
        folder: editedReplica(BGE, {
          'modules.json': (modules: any[]) => [
            ...modules.slice(0, 2),
            { idx: 2, name: '2', path: '2_Dense', type: 'sentence_transformers.models.Dense' },
            { idx: 3, name: '3', path: '3_Normalize', type: 'sentence_transformers.models.Normalize' },
          ],
        }),
        says: /Dense module 2_Dense after its pooling, and its ONNX file does not run them \(its outputs are last_hidden_state, with no sentence_embedding\)/,
      },
      {
        what: 'a pooling mode sentence-transformers does not have',
        folder: editedReplica(BGE, {
          '1_Pooling/config.json': (json) => ({ ...json, pooling_mode_cls_token: false, pooling_mode: 'median' }),
        }),
        says: /module 1_Pooling \(sentence_transformers\.models\.Pooling\) asks for pooling "median"/,
      },
    ];
    const s = new TestSystem(uniquePrefix('families-refused'));
    extra.push(s);
    for (const c of cases) {
      scratch.push(c.folder);
      const worker = s.startWorker({ model: BGE, env: { MODEL_DIR: c.folder.dir, DTYPE: 'q8' } });
      assert.match(await failedLoad(worker), c.says, c.what);
    }
  });

  it("the hub download fetches the modules' files: a CLS model from a mirror answers as its folder does", async () => {
    const mirror = new HubMirror({ [BGE]: { dir: path.join(MODEL_DIR, BGE) } });
    const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-hub-cache-'));
    scratch.push({ remove: () => fs.rmSync(cache, { recursive: true, force: true }) });
    await mirror.start();
    const s = new TestSystem(uniquePrefix('families-hub'));
    extra.push(s);
    try {
      await s.startGateway();
      s.startWorker({
        model: BGE,
        env: { MODEL_DIR: undefined, HF_ENDPOINT: mirror.url, HF_HUB_CACHE: cache, DTYPE: 'q8' },
      });
      await s.waitForWorkers(BGE);
      const snapshot = path.join(cache, `models--${BGE.replace('/', '--')}`, 'snapshots', HubMirror.COMMIT);
      for (const file of [
        'modules.json',
        '1_Pooling/config.json',
        'sentence_bert_config.json',
        'config_sentence_transformers.json',
      ])
        assert.ok(fs.existsSync(path.join(snapshot, file)), `${file} in the snapshot`);
      for (const c of embeddingCases(BGE)) {
        const [vector] = (await ok(s, '/embed', { model: BGE, inputs: [c.text] })) as number[][];
        assert.ok(cosine(vector, c.embedding_q8) >= Q8_COSINE, `"${c.text}"`);
      }
    } finally {
      await s.stop();
      await mirror.stop();
    }
  });
});
