/**
 * Issue 2, task parameters beyond the reference cases: each option changes the answer the way the
 * Hugging Face pipelines do, checked against the same model's plain output.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TestSystem, uniquePrefix } from './helpers/system.ts';
import { CLASSIFIER, EMBEDDER, FILL_MASK, NER } from './helpers/replicas.ts';

const norm = (v: number[]) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

describe('task parameters', () => {
  const system = new TestSystem(uniquePrefix('tasks'));
  before(async () => {
    await system.startGateway();
    // The NER replica's q8 weights tag every token of the text below B-LOC, so groups are words.
    for (const model of [NER, CLASSIFIER, EMBEDDER, FILL_MASK])
      system.startWorker({ model, env: { DTYPE: model === CLASSIFIER ? 'fp32' : 'q8' } });
    for (const model of [NER, CLASSIFIER, EMBEDDER, FILL_MASK]) await system.waitForWorkers(model);
  });
  after(() => system.stop());

  it('token-classification: word aggregation strategies agree with the per-token answer', async () => {
    const text = 'Unbelievably, Sarahs tokenization works in Londonderry';
    const tokens = (await system.infer(NER, text, { ignore_labels: [], aggregation_strategy: 'none' })).body as Array<{
      entity: string;
      score: number;
      word: string;
    }>;
    const words: (typeof tokens)[] = [];
    for (const t of tokens) (t.word.startsWith('##') ? words[words.length - 1] : words[words.push([]) - 1]).push(t);
    assert.ok(
      words.some((w) => w.length > 1),
      'the text has multi-piece words',
    );
    const run = async (aggregation_strategy: string) =>
      (await system.infer(NER, text, { aggregation_strategy, ignore_labels: [] })).body as Array<{
        entity_group: string;
        score: number;
        word: string;
      }>;

    assert.ok(
      tokens.every((t) => t.entity.startsWith('B-')),
      'every token opens its own entity',
    );
    const first = await run('first');
    // A group's word is the input's own text (here capitalised), the pieces' concatenation otherwise.
    assert.deepEqual(
      first.map((g) => g.word.toLowerCase()),
      words.map((w) => w.map((p) => p.word.replace(/^##/, '')).join('')),
    );
    first.forEach((g, i) => assert.ok(Math.abs(g.score - words[i][0].score) < 1e-9, 'first: the first piece decides'));
    const max = await run('max');
    max.forEach((g, i) =>
      assert.ok(Math.abs(g.score - Math.max(...words[i].map((p) => p.score))) < 1e-9, 'max: the surest piece decides'),
    );
    const average = await run('average');
    average.forEach((g, i) => {
      const scores = words[i].map((p) => p.score);
      assert.ok(
        g.score >= Math.min(...scores) - 1e-9 && g.score <= Math.max(...scores) + 1e-9,
        'average lies between its pieces',
      );
    });
    const simple = await run('simple');
    assert.equal(simple.length, tokens.length, 'simple: B- tokens never merge');
    assert.deepEqual(
      simple.map((g) => g.entity_group),
      tokens.map((t) => t.entity.slice(2)),
    );

    // ignore_labels filters by label; the default hides "O".
    const label = tokens[0].entity;
    const filtered = (await system.infer(NER, text, { ignore_labels: [label], aggregation_strategy: 'none' }))
      .body as typeof tokens;
    assert.ok(filtered.every((t) => t.entity !== label));
    assert.equal(filtered.length, tokens.filter((t) => t.entity !== label).length);
  });

  it('token-classification: start and end are offsets into the input, through lower-casing, accents, CJK and emoji', async () => {
    // Offsets count code points, as the Python pipelines do; the emoji is one code point ([UNK]).
    const text = 'Zoë Müller lives in 東京 😀 ok';
    const tokens = (await system.infer(NER, text, { ignore_labels: [], aggregation_strategy: 'none' })).body as Array<{
      word: string;
      start: number;
      end: number;
    }>;
    assert.deepEqual(
      tokens.map((t) => [t.word, t.start, t.end]),
      [
        ['zoe', 0, 3],
        ['muller', 4, 10],
        ['lives', 11, 16],
        ['in', 17, 19],
        ['東', 20, 21],
        ['京', 21, 22],
        ['[UNK]', 23, 24],
        ['ok', 25, 27],
      ],
    );
    const pieces = (await system.infer(NER, 'Unbelievably Sarahs', { ignore_labels: [], aggregation_strategy: 'none' }))
      .body as Array<{
      word: string;
      start: number;
      end: number;
    }>;
    const original = Array.from('Unbelievably Sarahs');
    for (const p of pieces)
      assert.equal(original.slice(p.start, p.end).join('').toLowerCase(), p.word.replace(/^##/, ''), JSON.stringify(p));
    // Every strategy carries offsets, and a group's word is exactly the input between them.
    for (const strategy of ['simple', 'first', 'average', 'max']) {
      const groups = (await system.infer(NER, text, { ignore_labels: [], aggregation_strategy: strategy }))
        .body as Array<{
        word: string;
        start: number;
        end: number;
      }>;
      assert.ok(groups.length > 0);
      for (const g of groups)
        assert.equal(Array.from(text).slice(g.start, g.end).join(''), g.word, `${strategy}: ${JSON.stringify(g)}`);
    }
  });

  it('token-classification on /models/<id> groups entities by default (aggregation_strategy "simple")', async () => {
    const grouped = (await system.infer(NER, 'Sarah lives in London')).body as Array<Record<string, unknown>>;
    assert.ok(
      grouped.every((g) => 'entity_group' in g && typeof g.start === 'number'),
      JSON.stringify(grouped),
    );
  });

  it('text-classification: top_k and function_to_apply', async () => {
    const text = 'This restaurant is awesome';
    // The Inference API answers one text as a list holding its list of labels.
    const top1 = (await system.infer(CLASSIFIER, text)).body[0];
    assert.equal(top1.length, 1, 'top_k defaults to 1');
    const all = (await system.infer(CLASSIFIER, text, { top_k: null })).body[0];
    assert.equal(all.length, 2);
    assert.ok(Math.abs(all[0].score + all[1].score - 1) < 1e-9, 'softmax sums to one');
    assert.deepEqual(top1[0], all[0]);
    const logits = (await system.infer(CLASSIFIER, text, { top_k: null, function_to_apply: 'none' })).body[0];
    const sigmoid = (await system.infer(CLASSIFIER, text, { top_k: null, function_to_apply: 'sigmoid' })).body[0];
    for (const s of sigmoid) {
      const logit = logits.find((l: any) => l.label === s.label).score;
      assert.ok(Math.abs(s.score - 1 / (1 + Math.exp(-logit))) < 1e-9);
    }
    const [a, b] = logits;
    assert.ok(
      Math.abs(all.find((x: any) => x.label === a.label).score - 1 / (1 + Math.exp(b.score - a.score))) < 1e-9,
      'softmax of the logits',
    );
  });

  it('feature-extraction: pooling and normalize', async () => {
    const text = 'This restaurant is awesome';
    const mean = (await system.infer(EMBEDDER, text)).body as number[];
    assert.ok(Math.abs(norm(mean) - 1) < 1e-6, 'normalised by default');
    const raw = (await system.infer(EMBEDDER, text, { normalize: false })).body as number[];
    assert.ok(Math.abs(norm(raw) - 1) > 1e-3, 'normalize: false keeps the raw mean');
    raw.forEach((v, i) => assert.ok(Math.abs(v / norm(raw) - mean[i]) < 1e-6));
    const tokens = (await system.infer(EMBEDDER, text, { pooling: 'none' })).body as number[][];
    assert.equal(tokens.length, 6, '[CLS] + 4 words + [SEP]');
    assert.equal(tokens[0].length, 384);
    const averaged = tokens[0].map((_, j) => tokens.reduce((s, t) => s + t[j], 0) / tokens.length);
    averaged.forEach((v, i) => assert.ok(Math.abs(v - raw[i]) < 1e-6, 'mean pooling is the mean of the token vectors'));
    const cls = (await system.infer(EMBEDDER, text, { pooling: 'cls', normalize: false })).body as number[];
    cls.forEach((v, i) => assert.ok(Math.abs(v - tokens[0][i]) < 1e-6, 'cls pooling is the first token'));
  });

  it('fill-mask: top_k and several masks', async () => {
    const five = (await system.infer(FILL_MASK, 'Paris is the [MASK] of France.')).body;
    assert.equal(five.length, 5, 'top_k defaults to 5');
    assert.ok(
      five.every((p: any, i: number) => i === 0 || p.score <= five[i - 1].score),
      'ranked',
    );
    assert.ok(five[0].sequence.includes(five[0].token_str));
    const two = (await system.infer(FILL_MASK, '[MASK] is the [MASK] of France.', { top_k: 2 })).body;
    assert.equal(two.length, 2, 'one list per mask');
    assert.ok(two.every((perMask: any[]) => perMask.length === 2));
  });
});
