import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ApiError, type Task } from '@tserve/contract';
import type { BatchOutput, Encoded, Engine } from '../../apps/worker/src/model/engine.ts';
import type { LoadedModel, ModelConfig } from '../../apps/worker/src/model/model.ts';
import { textClassificationHead } from '../../apps/worker/src/tasks/text-classification.ts';
import { tokenClassificationHead } from '../../apps/worker/src/tasks/token-classification.ts';
import { fillMaskHead } from '../../apps/worker/src/tasks/fill-mask.ts';
import { featureExtractionHead } from '../../apps/worker/src/tasks/feature-extraction.ts';
import { questionAnsweringHead } from '../../apps/worker/src/tasks/question-answering.ts';
import { zeroShotClassificationHead } from '../../apps/worker/src/tasks/zero-shot-classification.ts';
import { sentenceSimilarityHead } from '../../apps/worker/src/tasks/sentence-similarity.ts';
import { topK } from '../../apps/worker/src/tasks/math.ts';
import { sparseHead } from '../../apps/worker/src/tasks/sparse.ts';
import { promptOf } from '../../apps/worker/src/tasks/prompts.ts';

/**
 * The task heads read hand-made logits here, with a WordPiece-like stand-in for the tokenizer: a
 * fixed vocabulary, words split on spaces, "##" continuing a word.
 */
const VOCAB = [
  '[PAD]',
  '[UNK]',
  '[CLS]',
  '[SEP]',
  '[MASK]',
  'paris',
  'is',
  'the',
  'capital',
  'city',
  'of',
  'france',
  'john',
  '##son',
  'lives',
  'in',
];
const CLS = 2;
const SEP = 3;
const MASK = 4;
const idOf = (token: string) => Math.max(1, VOCAB.indexOf(token));

const tokenizer = {
  mask_token_id: MASK,
  mask_token: '[MASK]',
  /** Only what the heads ask of it: the template around an empty text. */
  encode: (text: string) => (text === '' ? [CLS, SEP] : assert.fail('not used')),
  decode: (ids: number[], options: { skip_special_tokens?: boolean } = {}) =>
    ids
      .filter((id) => !(options.skip_special_tokens && id <= MASK))
      .map((id) => VOCAB[id])
      .join(' ')
      .replaceAll(' ##', ''),
  _tokenizer: {
    id_to_token: (id: number) => VOCAB[id],
    normalizer: null,
    pre_tokenizer: null,
    model: { unk_token: '[UNK]', continuing_subword_prefix: '##' },
  },
};

function model(task: Task, config: ModelConfig = {}, maxLength = 512): LoadedModel {
  return {
    id: 'test/model',
    task,
    tasks: [task],
    tokenizer: tokenizer as unknown as LoadedModel['tokenizer'],
    config,
    maxLength,
    positions: maxLength,
    prompts: {},
    defaultPrompt: '',
    lowercase: false,
    paddingSide: 'right',
  };
}

/** [CLS] tokens [SEP] as one sequence. */
const sequence = (text: string, tokens: string[]): Encoded => ({ text, ids: [CLS, ...tokens.map(idOf), SEP] });

/** A [rows, classes] output from rows of logits. */
const pooled = (rows: number[][]): BatchOutput => ({
  data: Float32Array.from(rows.flat()),
  dims: [rows.length, rows[0].length],
});

/** A [rows, length, width] output from each row's per-token vectors. */
const perToken = (rows: number[][][]): BatchOutput => ({
  data: Float32Array.from(rows.flat(2)),
  dims: [rows.length, rows[0].length, rows[0][0].length],
});

/** A row of `classes` logits, `value` at `hot` and 0 elsewhere. */
const oneHot = (classes: number, hot: number, value: number) =>
  Array.from({ length: classes }, (_, i) => (i === hot ? value : 0));

const close = (actual: number, expected: number, what: string) =>
  assert.ok(Math.abs(actual - expected) < 1e-6, `${what}: ${actual} ≠ ${expected}`);

describe('text-classification head', () => {
  const labels = { id2label: { 0: 'NEGATIVE', 1: 'POSITIVE' } };
  const output = pooled([
    [0, 2],
    [3, -1],
  ]);
  const encoded = sequence('x', []);

  it('scores a row with a softmax and returns the top label; top_k null returns all, best first', () => {
    const head = textClassificationHead(model('text-classification', labels));
    const [best] = head.decode(output, 0, encoded, {}) as Array<{ label: string; score: number }>;
    assert.equal(best.label, 'POSITIVE');
    close(best.score, 1 / (1 + Math.exp(-2)), 'softmax of [0, 2]');
    const all = head.decode(output, 1, encoded, { top_k: null }) as Array<{ label: string; score: number }>;
    assert.deepEqual(
      all.map((l) => l.label),
      ['NEGATIVE', 'POSITIVE'],
    );
    close(all[0].score + all[1].score, 1, 'softmax sums to 1');
  });

  it('uses a sigmoid for multi-label and single-logit models, and raw logits with function_to_apply none', () => {
    const multi = textClassificationHead(
      model('text-classification', { ...labels, problem_type: 'multi_label_classification' }),
    );
    const scores = multi.decode(output, 0, encoded, { top_k: 2 }) as Array<{ label: string; score: number }>;
    close(scores[0].score, 1 / (1 + Math.exp(-2)), 'sigmoid(2)');
    close(scores[1].score, 0.5, 'sigmoid(0)');
    const single = textClassificationHead(model('text-classification', { id2label: { 0: 'RELEVANT' } }));
    close(
      (single.decode(pooled([[1]]), 0, encoded, {}) as Array<{ score: number }>)[0].score,
      1 / (1 + Math.exp(-1)),
      'one logit',
    );
    const raw = textClassificationHead(model('text-classification', labels)).decode(output, 1, encoded, {
      function_to_apply: 'none',
    });
    assert.deepEqual(raw, [{ label: 'NEGATIVE', score: 3 }]);
  });

  it('names labels missing from the config LABEL_<i>', () => {
    const head = textClassificationHead(model('text-classification'));
    assert.equal((head.decode(output, 0, encoded, {}) as Array<{ label: string }>)[0].label, 'LABEL_1');
  });
});

describe('token-classification head', () => {
  const config = { id2label: { 0: 'O', 1: 'B-PER', 2: 'I-PER', 3: 'B-LOC', 4: 'I-LOC' } };
  const text = 'johnson lives in paris';
  const encoded = sequence(text, ['john', '##son', 'lives', 'in', 'paris']);
  // [CLS] john ##son lives in paris [SEP]: "john" leans PER, "##son" strongly LOC, "paris" LOC.
  const output = perToken([
    [
      oneHot(5, 0, 5),
      oneHot(5, 1, 2),
      oneHot(5, 4, 6),
      oneHot(5, 0, 5),
      oneHot(5, 0, 5),
      oneHot(5, 3, 5),
      oneHot(5, 0, 5),
    ],
  ]);
  const head = tokenClassificationHead(model('token-classification', config));
  type Group = { entity_group: string; word: string; start: number | null; end: number | null; score: number };

  it('labels each token with its span in the input, skipping the template tokens and O', () => {
    const entities = head.decode(output, 0, encoded, {}) as Array<{
      entity: string;
      index: number;
      word: string;
      start: number;
      end: number;
    }>;
    assert.deepEqual(
      entities.map(({ entity, index, word, start, end }) => ({ entity, index, word, start, end })),
      [
        { entity: 'B-PER', index: 1, word: 'john', start: 0, end: 4 },
        { entity: 'I-LOC', index: 2, word: '##son', start: 4, end: 7 },
        { entity: 'B-LOC', index: 5, word: 'paris', start: 17, end: 22 },
      ],
    );
  });

  it('merges pieces into words by their first piece (first) or their best one (max)', () => {
    const first = head.decode(output, 0, encoded, { aggregation_strategy: 'first' }) as Group[];
    assert.deepEqual(
      first.map(({ entity_group, word, start, end }) => ({ entity_group, word, start, end })),
      [
        { entity_group: 'PER', word: 'johnson', start: 0, end: 7 },
        { entity_group: 'LOC', word: 'paris', start: 17, end: 22 },
      ],
    );
    const max = head.decode(output, 0, encoded, { aggregation_strategy: 'max' }) as Group[];
    assert.deepEqual(
      max.map((g) => [g.entity_group, g.word]),
      [
        ['LOC', 'johnson'],
        ['LOC', 'paris'],
      ],
    );
    close(max[0].score, Math.exp(6) / (Math.exp(6) + 4), "the best piece's probability");
  });

  it('groups B-/I- runs of tokens (simple), a B- starting a new group', () => {
    const simple = head.decode(output, 0, encoded, { aggregation_strategy: 'simple', ignore_labels: [] }) as Group[];
    assert.deepEqual(
      simple.map((g) => [g.entity_group, g.word]),
      [
        ['PER', 'john'],
        ['LOC', 'son'],
        ['O', 'lives in'],
        ['LOC', 'paris'],
      ],
    );
  });
});

describe('fill-mask head', () => {
  const head = fillMaskHead(model('fill-mask'));
  const tokens = ['paris', 'is', 'the', '[MASK]', 'of', 'france'];
  const encoded = sequence('paris is the [MASK] of france', tokens);
  const position = (hot: Record<string, number>) => VOCAB.map((t) => hot[t] ?? 0);

  it('ranks the vocabulary at the mask and fills the sentence with each candidate', () => {
    const rows = encoded.ids.map((_, t) => (t === 4 ? position({ capital: 5, city: 4 }) : position({})));
    const [best, second] = head.decode(perToken([rows]), 0, encoded, { top_k: 2 }) as Array<{
      token: number;
      token_str: string;
      sequence: string;
      score: number;
    }>;
    assert.deepEqual([best.token_str, second.token_str], ['capital', 'city']);
    assert.equal(best.token, idOf('capital'));
    assert.equal(best.sequence, 'paris is the capital of france');
    close(best.score / second.score, Math.E, 'softmax ratio of logits 5 and 4');
  });

  it('answers one list per mask when there are several, and refuses an input without a mask', () => {
    const two = sequence('[MASK] is the [MASK]', ['[MASK]', 'is', 'the', '[MASK]']);
    const rows = two.ids.map((_, t) => position(t === 1 ? { paris: 3 } : t === 4 ? { city: 3 } : {}));
    const perMask = head.decode(perToken([rows]), 0, two, { top_k: 1 }) as Array<Array<{ token_str: string }>>;
    assert.deepEqual(
      perMask.map((c) => c[0].token_str),
      ['paris', 'city'],
    );
    assert.throws(
      () => head.check!(sequence('no mask', ['paris']), {}),
      (err: unknown) => err instanceof ApiError && err.type === 'validation',
    );
  });

  it('gives at most 1000 candidates per input (masks x top_k), as top_k alone is capped for one mask', () => {
    const masks = (n: number) => sequence('masks', Array<string>(n).fill('[MASK]'));
    head.check!(masks(1), { top_k: 1000 });
    head.check!(masks(200), {});
    head.check!(masks(500), { top_k: 2 });
    assert.throws(
      () => head.check!(masks(500), { top_k: 3 }),
      (err: unknown) =>
        err instanceof ApiError &&
        err.type === 'validation' &&
        err.message.includes('500 mask tokens and top_k is 3: 1500 candidates, at most 1000'),
    );
    assert.throws(() => head.check!(masks(201), {}), /201 mask tokens and top_k is 5/);
  });
});

describe('feature-extraction head', () => {
  const head = featureExtractionHead(model('feature-extraction', { hidden_size: 2 }));
  // Row 1 is the one read; its third position is padding (the sequence has two tokens) and must not count.
  const output = perToken([
    [
      [9, 9],
      [9, 9],
      [9, 9],
    ],
    [
      [1, 0],
      [3, 4],
      [100, 100],
    ],
  ]);
  const encoded: Encoded = { text: 'two tokens', ids: [CLS, SEP] };

  it('mean-pools the real tokens of its row and normalizes by default', () => {
    const [x, y] = head.decode(output, 1, encoded, {}) as number[];
    close(x, Math.SQRT1_2, 'x');
    close(y, Math.SQRT1_2, 'y');
    assert.deepEqual(head.decode(output, 1, encoded, { normalize: false }), [2, 2]);
  });

  it('pools the first token (cls), or none: one vector per real token', () => {
    assert.deepEqual(head.decode(output, 1, encoded, { pooling: 'cls' }), [1, 0]);
    assert.deepEqual(head.decode(output, 1, encoded, { pooling: 'none' }), [
      [1, 0],
      [3, 4],
    ]);
    assert.deepEqual(head.decode(output, 1, encoded, { pooling: 'none', normalize: true }), [
      [1, 0],
      [0.6, 0.8],
    ]);
  });

  it('counts the numbers a sequence puts in the answer: one vector, or one per token with pooling none; wide where the config names no width', () => {
    assert.equal(head.answerValues!(encoded, {}), 2);
    assert.equal(head.answerValues!(encoded, { pooling: 'none' }), 4);
    assert.equal(
      featureExtractionHead(model('feature-extraction', { dim: 768 })).answerValues!(encoded, { pooling: 'none' }),
      2 * 768,
    );
    assert.equal(featureExtractionHead(model('feature-extraction')).answerValues!(encoded, {}), 4096);
  });

  it('scores sentence similarity as the cosine of normalized mean embeddings', () => {
    const similarity = sentenceSimilarityHead(model('sentence-similarity', { hidden_size: 2 }));
    const vectors = [
      [1, 0],
      [0, 2],
      [3, 3],
    ].map((v) => similarity.decode(perToken([[v]]), 0, { text: '', ids: [CLS] }, {}));
    const [orthogonal, diagonal] = similarity.combine!(
      vectors,
      { source_sentence: '', sentences: ['', ''] },
      {},
    ) as number[];
    close(orthogonal, 0, 'orthogonal');
    close(diagonal, Math.SQRT1_2, '45 degrees');
  });
});

/** An engine over whitespace tokens: [CLS] first [SEP] second [SEP], as a BERT pair. */
function pairEngine(): Engine & { pairs: Array<[string, string]> } {
  const build = (first: string[], second: string[] = []) => {
    const tokens = ['[CLS]', ...first, '[SEP]', ...(second.length ? [...second, '[SEP]'] : [])];
    return {
      ids: tokens.map(idOf),
      typeIds: tokens.map((_, i) => (i > first.length + 1 ? 1 : 0)),
      at: first.length + 2,
    };
  };
  const pairs: Array<[string, string]> = [];
  return {
    pairs,
    pieces: (text: string) => text.split(' ').filter(Boolean),
    leadingPieces: (text: string, count: number) => text.split(' ').filter(Boolean).slice(0, count),
    build,
    specialTokens: (pair: boolean) => (pair ? 3 : 2),
    encodePair: (first: string, second: string): Encoded => {
      pairs.push([first, second]);
      return { text: first, ...build(first.split(' '), second.split(' ')) };
    },
  } as unknown as Engine & { pairs: Array<[string, string]> };
}

describe('sparse head (SPLADE)', () => {
  // Row 1 is the one read: two real tokens over a vocabulary of four, and a padded position that must not count.
  const output = perToken([
    [
      [9, 9, 9, 9],
      [9, 9, 9, 9],
      [9, 9, 9, 9],
    ],
    [
      [1, -2, 0, 3],
      [2, -1, 0, 0.5],
      [100, 100, 100, 100],
    ],
  ]);
  const encoded: Encoded = { text: 'two tokens', ids: [CLS, SEP] };
  const loaded = model('fill-mask');

  it('max-pools log(1 + ReLU(logit)) over the real tokens, and drops the zeros', () => {
    const head = sparseHead(loaded, { strategy: 'max', activation: 'relu' });
    const values = head.decode(output, 1, encoded, {}) as Array<{ index: number; value: number }>;
    assert.deepEqual(
      values.map((v) => v.index),
      [0, 3],
    );
    close(values[0].value, Math.log1p(2), 'index 0');
    close(values[1].value, Math.log1p(3), 'index 3');
  });

  it('sums instead where the pooling says so, and log1p_relu takes the log once more', () => {
    const summed = sparseHead(loaded, { strategy: 'sum', activation: 'relu' }).decode(output, 1, encoded, {}) as Array<{
      value: number;
    }>;
    close(summed[0].value, Math.log1p(1) + Math.log1p(2), 'sum');
    const twice = sparseHead(loaded, { strategy: 'max', activation: 'log1p_relu' }).decode(
      output,
      1,
      encoded,
      {},
    ) as Array<{
      value: number;
    }>;
    close(twice[1].value, Math.log1p(Math.log1p(3)), 'log1p_relu');
  });
});

describe('prompts', () => {
  const loaded = { ...model('feature-extraction'), prompts: { query: 'query: ' }, defaultPrompt: 'passage: ' };

  it("gives a named prompt's text, or the default where the request names none", () => {
    assert.equal(promptOf(loaded, 'query'), 'query: ');
    assert.equal(promptOf(loaded, undefined), 'passage: ');
  });

  it("refuses an unknown name, naming the model's prompts, or saying it has none", () => {
    assert.throws(
      () => promptOf(loaded, 'nope'),
      (err: unknown) => err instanceof ApiError && err.status === 400 && /prompts: query$/.test(err.message),
    );
    assert.throws(() => promptOf(model('feature-extraction'), 'query'), /has no prompts/);
  });
});

describe('question-answering head', () => {
  const context = 'one two three four five six seven eight nine ten';
  const engine = pairEngine();
  const head = questionAnsweringHead(model('question-answering'));

  /** Start and end logits for each window: `start`/`end` give a position's logit (0 otherwise). */
  function run(
    parameters: Record<string, unknown>,
    logits: (window: number, position: number) => { start?: number; end?: number },
  ) {
    const sequences = head.encode!({ question: 'which', context }, parameters, engine);
    const width = Math.max(...sequences.map((s) => s.ids.length));
    const starts = new Float32Array(sequences.length * width);
    const ends = new Float32Array(sequences.length * width);
    sequences.forEach((_, w) => {
      for (let i = 0; i < width; i++) {
        starts[w * width + i] = logits(w, i).start ?? 0;
        ends[w * width + i] = logits(w, i).end ?? 0;
      }
    });
    const output: BatchOutput = { data: starts, endLogits: ends, dims: [sequences.length, width] };
    const parts = sequences.map((s, w) => head.decode(output, w, s, parameters));
    return { sequences, answer: head.combine!(parts, { question: 'which', context }, parameters) };
  }

  it('picks the best span by p(start) × p(end), with code-point offsets into the context', () => {
    // [CLS] which [SEP] one two ... : context token k is at position 3 + k.
    const { sequences, answer } = run({}, (_w, i) => (i === 3 + 5 ? { start: 8 } : i === 3 + 6 ? { end: 8 } : {}));
    assert.equal(sequences.length, 1);
    assert.deepEqual(
      { ...(answer as object), score: undefined },
      { answer: 'six seven', start: 24, end: 33, score: undefined },
    );
  });

  it('never picks a span longer than max_answer_len, nor one ending before it starts', () => {
    const { answer } = run({ max_answer_len: 2 }, (_w, i) =>
      i === 3 + 1 ? { start: 8 } : i === 3 + 0 ? { end: 9 } : i === 3 + 7 ? { end: 8 } : i === 3 + 2 ? { end: 4 } : {},
    );
    assert.equal((answer as { answer: string }).answer, 'two three');
  });

  it('reads a long context in overlapping windows and finds the answer in a later one', () => {
    // 6 context tokens per window (10 less the question and 3 specials), 2 shared: windows start at tokens 0 and 4.
    const { sequences, answer } = run({ max_seq_len: 10, doc_stride: 2 }, (w, i) =>
      w === 1 && i === 3 + 4 ? { start: 9, end: 9 } : {},
    );
    assert.equal(sequences.length, 2);
    assert.deepEqual(
      { ...(answer as object), score: undefined },
      { answer: 'nine', start: 40, end: 44, score: undefined },
    );
  });

  it('answers "" when no answer beats the no-answer score and handle_impossible_answer is set', () => {
    const { answer } = run({ handle_impossible_answer: true, top_k: 2 }, (_w, i) =>
      i === 0 ? { start: 12, end: 12 } : {},
    );
    assert.deepEqual((answer as Array<{ answer: string }>).map((a) => a.answer)[0], '');
  });

  it('refuses a window stride that would not advance', () => {
    assert.throws(
      () => head.encode!({ question: 'which', context }, { max_seq_len: 10, doc_stride: 6 }, engine),
      /doc_stride/,
    );
  });
});

describe('zero-shot-classification head', () => {
  const config = { label2id: { contradiction: 0, neutral: 1, entailment: 2 } };
  const candidate_labels = ['sports', 'politics', 'cooking'];
  // One row per candidate label: [contradiction, neutral, entailment].
  const logits = [
    [0, 0, 1],
    [0, 0, 3],
    [0, 0, 0],
  ];
  const head = zeroShotClassificationHead(model('zero-shot-classification', config));
  const parts = logits.map((_, i) => head.decode(pooled(logits), i, { text: '', ids: [] }, { candidate_labels }));

  it('runs one pair per label, the label in the hypothesis template', () => {
    const engine = pairEngine();
    head.encode!('the match ended', { candidate_labels, hypothesis_template: 'About {}.' }, engine);
    assert.deepEqual(
      engine.pairs.map(([, hypothesis]) => hypothesis),
      ['About sports.', 'About politics.', 'About cooking.'],
    );
  });

  it('compares entailment across labels, or scores each alone against contradiction (multi_label)', () => {
    const single = head.combine!(parts, 'text', { candidate_labels }) as {
      sequence: string;
      labels: string[];
      scores: number[];
    };
    assert.deepEqual(single.labels, ['politics', 'sports', 'cooking']);
    const e = [Math.exp(3), Math.exp(1), 1];
    close(single.scores[0], e[0] / (e[0] + e[1] + e[2]), 'softmax over entailment logits');
    const multi = head.combine!(parts, 'text', { candidate_labels, multi_label: true }) as {
      labels: string[];
      scores: number[];
    };
    assert.deepEqual(multi.labels, ['politics', 'sports', 'cooking']);
    close(multi.scores[2], 0.5, 'entailment 0 against contradiction 0');
  });

  it('refuses a model with no entailment label', () => {
    const noNli = zeroShotClassificationHead(
      model('zero-shot-classification', { id2label: { 0: 'NEGATIVE', 1: 'POSITIVE' } }),
    );
    assert.throws(
      () => noNli.encode!('x', { candidate_labels }, pairEngine()),
      (err: unknown) => err instanceof ApiError && err.type === 'validation',
    );
  });
});

describe('topK', () => {
  it('gives the indices of the k largest values, largest first and the first of equals first, as a full sort does', () => {
    let seed = 11;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (const length of [1, 7, 1000, 30_522]) {
      // Few distinct values, so that ties are many.
      const values = Float32Array.from({ length }, () => Math.floor(random() * 50) / 7);
      const sorted = Array.from({ length }, (_, i) => i).sort((a, b) => values[b] - values[a]);
      for (const k of [1, 5, 100, 1000, length, length + 3])
        assert.deepEqual(topK(values, k), sorted.slice(0, k), `length ${length}, k ${k}`);
    }
  });
});
