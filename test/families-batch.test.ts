/**
 * Issue 84: DTYPE=auto, which on a CPU runs int8 per row (written from the fp32 file where the
 * replica ships one, else from its q8 file), answers each family's input the same (to 1e-5) alone,
 * batched with inputs of other lengths in one request, and in concurrent requests: CLS and
 * last-token pooling, a decoder padded on the left, a Dense head inside the graph, XLM-R pairs and a
 * DeBERTa NLI head. How far int8 per row lies from the references is reported, and bounded.
 */
import { after, before, describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import type { ReadyBody } from '@tserve/contract';
import { TestSystem, uniquePrefix } from './helpers/system.ts';
import { linkedModelDir } from './helpers/fp32-models.ts';
import { assertSameAnswer } from './helpers/answers.ts';
import {
  BGE_RERANKER,
  DEBERTA_NLI,
  EMBEDDERS,
  FAMILIES,
  QWEN3,
  cosine,
  familyReference,
  type EmbeddingCase,
  type RerankCase,
} from './helpers/families.ts';

const TOLERANCE = 1e-5;
const REF = familyReference();
const TARGET = 'The soup was cold but the waiter in Paris was friendly.';
const MATES = [
  'Fine.',
  'My friend Anna from Berlin said the dessert and the coffee were the best part of a long evening.',
];
const BATCH = [MATES[0], TARGET, MATES[1]];

describe('the families answer the same whatever the batch, on DTYPE=auto', () => {
  const models = linkedModelDir(FAMILIES);
  const system = new TestSystem(uniquePrefix('families-batch'), undefined, { MODEL_DIR: models.dir });

  async function ok(pathname: string, body: unknown): Promise<any> {
    const res = await system.post(pathname, body);
    assert.equal(res.status, 200, `${pathname}: ${JSON.stringify(res.body)}`);
    return res.body;
  }

  const routes: Array<{
    name: string;
    model: string;
    inputs?: string[];
    answers: (inputs: string[]) => Promise<unknown[]>;
  }> = [
    ...EMBEDDERS.flatMap((model) => [
      {
        name: `${model} OpenAI /v1/embeddings`,
        model,
        answers: async (texts: string[]) =>
          (await ok('/v1/embeddings', { model, input: texts })).data.map((d: { embedding: number[] }) => d.embedding),
      },
      { name: `${model} TEI /embed`, model, answers: (texts: string[]) => ok('/embed', { model, inputs: texts }) },
      {
        name: `${model} Inference API /models/<id>`,
        model,
        answers: (texts: string[]) => ok(`/models/${model}`, { inputs: texts }),
      },
    ]),
    {
      name: `${QWEN3} TEI /embed with the query prompt`,
      model: QWEN3,
      answers: (texts) => ok('/embed', { model: QWEN3, inputs: texts, prompt_name: 'query' }),
    },
    {
      name: `${BGE_RERANKER} TEI /rerank (scores by document)`,
      model: BGE_RERANKER,
      answers: async (texts) => {
        const ranked = (await ok('/rerank', {
          model: BGE_RERANKER,
          query: 'a friendly waiter',
          texts,
          raw_scores: true,
        })) as Array<{
          index: number;
          score: number;
        }>;
        return texts.map((_t, i) => ranked.find((r) => r.index === i)!.score);
      },
    },
    {
      name: `${BGE_RERANKER} Cohere /v2/rerank (scores by document)`,
      model: BGE_RERANKER,
      answers: async (documents) => {
        const { results } = (await ok('/v2/rerank', {
          model: BGE_RERANKER,
          query: 'a friendly waiter',
          documents,
        })) as {
          results: Array<{ index: number; relevance_score: number }>;
        };
        return documents.map((_t, i) => results.find((r) => r.index === i)!.relevance_score);
      },
    },
    {
      name: `${DEBERTA_NLI} zero-shot, multi-label (each label a pair of its own)`,
      model: DEBERTA_NLI,
      inputs: ['food', 'the friendly service', 'a long evening of travel by train across the north of Germany'],
      answers: async (labels) => {
        const body = await ok(`/models/${DEBERTA_NLI}`, {
          inputs: TARGET,
          parameters: { candidate_labels: labels, multi_label: true },
        });
        return labels.map((label) => body.scores[body.labels.indexOf(label)]);
      },
    },
  ];

  before(async () => {
    await system.startGateway();
    // No DTYPE: auto, int8 per row on the CPU. Two at a time: each writes its int8-row file first.
    for (let i = 0; i < FAMILIES.length; i += 2) {
      const pair = FAMILIES.slice(i, i + 2);
      for (const model of pair) system.startWorker({ model });
      for (const model of pair) await system.waitForWorkers(model);
    }
  });
  after(async () => {
    await system.stop();
    models.remove();
  });

  it('every family runs int8 per row, from fp32 where the replica ships it, and says nothing of batch mates', async () => {
    const ready = (await (await fetch(`${system.url}/ready`)).json()) as ReadyBody;
    for (const model of FAMILIES) {
      assert.deepEqual(ready.models[model].devices, ['cpu/int8-row'], model);
      const from = [DEBERTA_NLI, 'replica/gte-modernbert-base'].includes(model) ? 'model.onnx' : 'model_quantized.onnx';
      assert.equal(ready.models[model].weights_file, `onnx/${from}+int8-row-v2`, model);
      assert.equal(ready.models[model].warning, undefined, model);
    }
  });

  for (const route of routes) {
    it(`${route.name}: alone, batched in one request, and in concurrent requests`, async () => {
      const inputs = route.inputs ?? BATCH;
      const [alone] = await route.answers([inputs[1]]);
      const [, batched] = await route.answers(inputs);
      assertSameAnswer(alone, batched, 'batched in one request', TOLERANCE);
      const concurrent = await Promise.all(inputs.map(async (input) => (await route.answers([input]))[0]));
      assertSameAnswer(alone, concurrent[1], 'in concurrent requests', TOLERANCE);
    });
  }

  it('int8 per row stays close to the references: embeddings by cosine, reranker logits', async (t: TestContext) => {
    for (const model of EMBEDDERS) {
      const cases = REF[model].cases as EmbeddingCase[];
      let least = 1;
      for (const c of cases) {
        const [vector] = (await ok('/embed', {
          model,
          inputs: [c.text],
          ...(c.prompt_name ? { prompt_name: c.prompt_name } : {}),
        })) as number[][];
        least = Math.min(least, cosine(vector, c.embedding));
      }
      t.diagnostic(`${model}: int8-row, least cosine to sentence-transformers on torch ${least.toFixed(5)}`);
      assert.ok(least >= 0.99, `${model}: ${least}`);
    }
    // The reranker has no fp32 file: int8-row is written from its q8 one, itself some 0.07 off torch here.
    const c = (REF[BGE_RERANKER].cases as RerankCase[])[0];
    const ranked = (await ok('/rerank', {
      model: BGE_RERANKER,
      query: c.query,
      texts: c.documents,
      raw_scores: true,
    })) as Array<{ index: number; score: number }>;
    for (const r of ranked) {
      const torch = c.results[r.index].logit;
      t.diagnostic(
        `${BGE_RERANKER} document ${r.index}: int8-row logit ${r.score.toFixed(4)}, torch ${torch.toFixed(4)}`,
      );
      assert.ok(Math.abs(r.score - torch) < 0.25, `document ${r.index}: ${r.score} vs ${torch}`);
    }
    assert.deepEqual(
      ranked.map((r) => r.index),
      (c as unknown as { ranking: number[] }).ranking,
    );
  });
});
