/**
 * Issue 45: a server that batches behind the client's back must not change the client's answer.
 * Every task on every protocol route answers an input the same (to 1e-5) alone and batched with
 * inputs of other lengths, in one request and in concurrent ones; a reranker's order is the order
 * of the scores its documents get alone. So for DTYPE=fp32; for DTYPE=auto, which on a CPU runs
 * int8 per row written from the fp32 file (issue 55); and for DTYPE=int8-row written from the
 * shared folder's q8 files. A per-tensor q8 worker answers the same input differently in a batch:
 * that shows the batches here do mix, and /ready and /info say so.
 */
import { after, before, describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import type { ReadyBody } from '@tserve/contract';
import { TestSystem, uniquePrefix } from './helpers/system.ts';
import { fp32ModelDir, linkedModelDir } from './helpers/fp32-models.ts';
import { CLASSIFIER, EMBEDDER, FILL_MASK, NER, NLI, QA, RERANKER } from './helpers/replicas.ts';
import { assertSameAnswer, compareAnswers } from './helpers/answers.ts';

const TOLERANCE = 1e-5;
const MODELS = [CLASSIFIER, NER, NLI, EMBEDDER, FILL_MASK, QA, RERANKER];

/** The input whose answers are compared, and batch mates shorter and longer than it (one model call: planCalls pads at most 2x). */
const TARGET = 'The soup was cold but the waiter in Paris was friendly.';
const MATES = [
  'Fine.',
  'My friend Anna from Berlin said the dessert and the coffee were the best part of a long evening.',
];
const BATCH = [MATES[0], TARGET, MATES[1]];

describe('the same answer whatever the batch', () => {
  const models = fp32ModelDir(MODELS);
  const q8Models = linkedModelDir(MODELS, { q8Only: true });
  const system = new TestSystem(uniquePrefix('batch-invariance'), undefined, { MODEL_DIR: models.dir });
  /** DTYPE=auto on the fp32 folder: int8 per row from the fp32 weights. */
  const auto = new TestSystem(uniquePrefix('batch-invariance-auto'), undefined, { MODEL_DIR: models.dir });
  /** DTYPE=int8-row on q8 files: per-tensor quantizers rewritten per row. */
  const rows = new TestSystem(uniquePrefix('batch-invariance-rows'), undefined, { MODEL_DIR: q8Models.dir });
  const q8 = new TestSystem(uniquePrefix('batch-invariance-q8'), undefined, { MODEL_DIR: q8Models.dir });
  const systems = [system, auto, rows, q8];

  /** The system a route's calls go to: the fp32 one, unless a test says otherwise. */
  let target = system;
  async function ok(pathname: string, body: unknown): Promise<any> {
    const res = await target.post(pathname, body);
    assert.equal(res.status, 200, `${pathname}: ${JSON.stringify(res.body)}`);
    return res.body;
  }

  /** Each route, as a function from inputs to one answer per input, in order. */
  const routes: Array<{
    name: string;
    model: string;
    inputs?: unknown[];
    answers: (inputs: any[]) => Promise<unknown[]>;
  }> = [
    {
      name: 'text-classification /models',
      model: CLASSIFIER,
      answers: (texts) => ok(`/models/${CLASSIFIER}`, { inputs: texts, parameters: { top_k: null } }),
    },
    {
      name: 'text-classification POST / (the default model)',
      model: CLASSIFIER,
      answers: (texts) => ok('/', { inputs: texts, parameters: { top_k: null } }),
    },
    { name: 'token-classification /models', model: NER, answers: (texts) => ok(`/models/${NER}`, { inputs: texts }) },
    {
      name: 'zero-shot-classification /models (multi-label: each candidate label is a pair of its own)',
      model: NLI,
      inputs: ['food', 'the friendly service', 'a long evening of travel by train across the north of Germany'],
      answers: async (labels) => {
        const body = await ok(`/models/${NLI}`, {
          inputs: TARGET,
          parameters: { candidate_labels: labels, multi_label: true },
        });
        return labels.map((label) => body.scores[body.labels.indexOf(label)]);
      },
    },
    {
      name: 'feature-extraction /models',
      model: EMBEDDER,
      answers: (texts) => ok(`/models/${EMBEDDER}`, { inputs: texts }),
    },
    {
      name: 'sentence-similarity /models',
      model: EMBEDDER,
      answers: async (texts) =>
        ok(`/models/${EMBEDDER}`, { inputs: { source_sentence: 'A friendly waiter', sentences: texts } }),
    },
    {
      name: 'fill-mask /models',
      model: FILL_MASK,
      inputs: [
        'A [MASK].',
        'The soup was cold but the [MASK] in Paris was friendly.',
        'My friend Anna from Berlin said the [MASK] and the coffee were the best part of a long evening.',
      ],
      answers: (texts) => ok(`/models/${FILL_MASK}`, { inputs: texts }),
    },
    {
      name: 'question-answering /models',
      model: QA,
      inputs: [
        { question: 'Who?', context: 'Anna.' },
        { question: 'Where was the waiter?', context: TARGET },
        { question: 'Who said it?', context: MATES[1] },
      ],
      answers: async (pairs) => {
        const body = await ok(`/models/${QA}`, { inputs: pairs });
        return Array.isArray(body) ? body : [body];
      },
    },
    {
      name: 'OpenAI /v1/embeddings',
      model: EMBEDDER,
      answers: async (texts) =>
        (await ok('/v1/embeddings', { model: EMBEDDER, input: texts })).data.map(
          (d: { embedding: number[] }) => d.embedding,
        ),
    },
    { name: 'TEI /embed', model: EMBEDDER, answers: (texts) => ok('/embed', { inputs: texts, model: EMBEDDER }) },
    {
      name: 'TEI /embed_all (token vectors)',
      model: EMBEDDER,
      answers: (texts) => ok('/embed_all', { inputs: texts, model: EMBEDDER }),
    },
    {
      name: "Cohere's /v2/rerank (scores by document)",
      model: RERANKER,
      answers: async (texts) => {
        const { results } = (await ok('/v2/rerank', {
          query: 'a friendly waiter',
          documents: texts,
          model: RERANKER,
        })) as {
          results: Array<{ index: number; relevance_score: number }>;
        };
        return texts.map((_t, i) => results.find((r) => r.index === i)!.relevance_score);
      },
    },
    {
      name: 'TEI /predict',
      model: CLASSIFIER,
      answers: (texts) => ok('/predict', { inputs: texts, model: CLASSIFIER, raw_scores: true }),
    },
    {
      name: 'TEI /rerank (scores by document)',
      model: RERANKER,
      answers: async (texts) => {
        const ranked = (await ok('/rerank', {
          query: 'a friendly waiter',
          texts,
          model: RERANKER,
          raw_scores: true,
        })) as Array<{
          index: number;
          score: number;
        }>;
        return texts.map((_t, i) => ranked.find((r) => r.index === i)!.score);
      },
    },
    {
      name: 'KServe v2 /v2/models/{id}/infer',
      model: CLASSIFIER,
      answers: async (texts) => {
        const body = await ok(`/v2/models/${CLASSIFIER}/infer`, {
          inputs: [{ name: 'text', shape: [texts.length], datatype: 'BYTES', data: texts }],
          outputs: [{ name: 'logits' }],
        });
        const [logits] = body.outputs as Array<{ shape: number[]; data: number[] }>;
        const width = logits.shape[1];
        return texts.map((_t, i) => logits.data.slice(i * width, (i + 1) * width));
      },
    },
    {
      name: 'KServe v2 /v2/models/{id}/infer (embeddings)',
      model: EMBEDDER,
      answers: async (texts) => {
        const body = await ok(`/v2/models/${EMBEDDER}/infer`, {
          inputs: [{ name: 'text', shape: [texts.length], datatype: 'BYTES', data: texts }],
        });
        const [out] = body.outputs as Array<{ shape: number[]; data: number[] }>;
        return texts.map((_t, i) => out.data.slice(i * out.shape[1], (i + 1) * out.shape[1]));
      },
    },
  ];

  before(async () => {
    await Promise.all(systems.map((s) => s.startGateway({ DEFAULT_MODEL: CLASSIFIER })));
    // One model's four workers at a time: 28 starting at once (two of them rewriting weights) would
    // share two cores for longer than a worker's start is given.
    for (const model of MODELS) {
      system.startWorker({ model, env: { DTYPE: 'fp32' } });
      // No DTYPE: auto must run int8 per row, from the fp32 file each model folder has.
      auto.startWorker({ model });
      rows.startWorker({ model, env: { DTYPE: 'int8-row' } });
      q8.startWorker({ model, env: { DTYPE: 'q8' } });
      await Promise.all(systems.map((s) => s.waitForWorkers(model)));
    }
  });
  after(async () => {
    await Promise.all(systems.map((s) => s.stop()));
    models.remove();
    q8Models.remove();
  });

  it('DTYPE=auto runs int8 per row on the CPU, written from fp32 where the model has it, and says nothing of batch mates', async () => {
    for (const [s, file] of [
      [auto, 'onnx/model.onnx+int8-row-v2'],
      [rows, 'onnx/model_quantized.onnx+int8-row-v2'],
    ] as const) {
      const ready = (await (await fetch(`${s.url}/ready`)).json()) as ReadyBody;
      for (const model of MODELS) {
        assert.deepEqual(ready.models[model].devices, ['cpu/int8-row'], model);
        assert.equal(ready.models[model].weights_file, file, model);
        assert.equal(ready.models[model].warning, undefined, model);
      }
    }
    const info = (await (await fetch(`${auto.url}/info?model=${EMBEDDER}`)).json()) as {
      model_dtype: string;
      warning?: string;
    };
    assert.equal(info.model_dtype, 'int8-row');
    assert.equal(info.warning, undefined);
  });

  for (const [dtype, on] of [
    ['fp32', system],
    ['auto (int8-row from fp32)', auto],
    ['int8-row from q8', rows],
  ] as const) {
    for (const route of routes) {
      it(`${dtype}, ${route.name}: alone, batched in one request, and in concurrent requests`, async () => {
        target = on;
        try {
          const inputs = route.inputs ?? BATCH;
          const [alone] = await route.answers([inputs[1]]);
          const [, batched] = await route.answers(inputs);
          assertSameAnswer(alone, batched, 'batched in one request', TOLERANCE);
          const concurrent = await Promise.all(inputs.map(async (input) => (await route.answers([input]))[0]));
          assertSameAnswer(alone, concurrent[1], 'in concurrent requests', TOLERANCE);
        } finally {
          target = system;
        }
      });
    }
  }

  it('a second start finds the int8-row file and does not rewrite it', async () => {
    const onnx = path.join(q8Models.dir, CLASSIFIER, 'onnx');
    const written = () => fs.readdirSync(onnx).filter((f) => f.startsWith('model_int8_row_'));
    assert.equal(written().length, 1, 'the first start wrote one int8-row file beside the q8 one');
    const before = fs.statSync(path.join(onnx, written()[0]));
    const again = new TestSystem(uniquePrefix('batch-invariance-again'), undefined, { MODEL_DIR: q8Models.dir });
    try {
      await again.startGateway();
      again.startWorker({ model: CLASSIFIER, env: { DTYPE: 'int8-row' } });
      await again.waitForWorkers(CLASSIFIER);
      // A rewrite would have renamed a new file over it: another inode.
      const after = fs.statSync(path.join(onnx, written()[0]));
      assert.deepEqual([written().length, after.ino, after.mtimeMs], [1, before.ino, before.mtimeMs]);
      const [first, second] = await Promise.all(
        [rows, again].map(async (s) => (await (await fetch(`${s.url}/ready`)).json()) as ReadyBody),
      );
      assert.equal(second.models[CLASSIFIER].weights_sha256, first.models[CLASSIFIER].weights_sha256);
    } finally {
      await again.stop();
    }
  });

  it('TEI /rerank: the order of a batch is the order of the scores each document gets alone', async () => {
    const documents = [
      'The waiter was friendly.',
      'Cold soup.',
      'A waiter in Paris who smiled at every table all evening long.',
      'Trains to Berlin.',
    ];
    const ranked = (await ok('/rerank', {
      query: 'a friendly waiter',
      texts: documents,
      model: RERANKER,
      raw_scores: true,
    })) as Array<{
      index: number;
      score: number;
    }>;
    const alone = await Promise.all(
      documents.map(
        async (text) =>
          (
            (await ok('/rerank', {
              query: 'a friendly waiter',
              texts: [text],
              model: RERANKER,
              raw_scores: true,
            })) as Array<{ score: number }>
          )[0].score,
      ),
    );
    assert.deepEqual(
      ranked.map((r) => r.index),
      alone
        .map((score, index) => ({ score, index }))
        .sort((a, b) => b.score - a.score)
        .map((r) => r.index),
    );
    ranked.forEach((r) => assert.ok(Math.abs(r.score - alone[r.index]) <= TOLERANCE));
  });

  it('q8 (asked for: auto never takes it on a CPU): the same batches shift its answer, and /ready and /info say so', async (t: TestContext) => {
    const ready = (await (await fetch(`${q8.url}/ready`)).json()) as ReadyBody;
    assert.deepEqual(ready.models[EMBEDDER].devices, ['cpu/q8']);
    assert.match(ready.models[EMBEDDER].warning ?? '', /answers shift with their batch mates.*DTYPE=int8-row/);
    const info = (await (await fetch(`${q8.url}/info?model=${EMBEDDER}`)).json()) as {
      model_dtype: string;
      warning?: string;
    };
    assert.equal(info.model_dtype, 'q8');
    assert.match(info.warning ?? '', /batch mates/);
    target = q8;
    try {
      // The same routes and batches as above, on q8: the figures docs/models.md quotes.
      for (const route of routes) {
        const inputs = route.inputs ?? BATCH;
        const [alone] = await route.answers([inputs[1]]);
        const [, batched] = await route.answers(inputs);
        const { same, largest } = compareAnswers(alone, batched);
        t.diagnostic(
          `q8 ${route.name}: batched vs alone, ${same ? `largest difference ${largest.toExponential(1)}` : 'labels or tokens differ'}`,
        );
      }
      const openai = routes.find((r) => r.name === 'OpenAI /v1/embeddings')!;
      const [alone] = (await openai.answers([TARGET])) as number[][];
      const [, batched] = (await openai.answers(BATCH)) as number[][];
      t.diagnostic(
        `q8 ${EMBEDDER}: cosine batched vs alone ${alone.reduce((sum, v, i) => sum + v * batched[i], 0).toFixed(4)}`,
      );
      assert.ok(
        compareAnswers(alone, batched).largest > TOLERANCE,
        'q8 answers shift in these batches: the fp32 checks above would catch a batch-dependent answer',
      );
    } finally {
      target = system;
    }
  });
});
