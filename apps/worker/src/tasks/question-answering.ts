import { ApiError, type QuestionAnsweringInput, type QuestionAnsweringParameters } from '@tserve/contract';
import type { BatchOutput, Encoded, Engine } from '../model/engine.js';
import type { LoadedModel } from '../model/model.js';
import type { TaskHead } from './head.js';
import { windows } from '../model/truncation.js';
import {
  alignWords,
  codePointSlicer,
  tokenizerParts,
  type Alignment,
  type Span,
  type TokenizerParts,
} from './offsets.js';

/** One window of the context, as one sequence: [CLS] question [SEP] context tokens [from, from + length) [SEP]. */
interface ContextWindow {
  /** Index in the sequence of the window's first context token. */
  at: number;
  /** Index in the context's tokens of that token. */
  from: number;
  length: number;
  alignment: Alignment;
}

interface Candidate {
  score: number;
  start: number;
  end: number;
}

interface WindowAnswers {
  /** The [CLS] score: the model's "no answer in this window". */
  nullScore: number;
  candidates: Candidate[];
}

/**
 * Most windows one question may run as: each is a full sequence of the batch, so an unbounded
 * context would let one request take a worker's whole batch many times over.
 */
const MAX_WINDOWS = 64;

/** Logits where no answer may start or end, as the pipeline masks them. */
const MASKED = -10000;

/** Softmax over a sequence's own positions, masked ones excluded. */
function maskedSoftmax(logits: Float32Array, length: number, allowed: (i: number) => boolean): Float64Array {
  const values = new Float64Array(length);
  let max = -Infinity;
  for (let i = 0; i < length; i++) {
    values[i] = allowed(i) ? logits[i] : MASKED;
    if (values[i] > max) max = values[i];
  }
  let sum = 0;
  for (let i = 0; i < length; i++) sum += values[i] = Math.exp(values[i] - max);
  for (let i = 0; i < length; i++) values[i] /= sum;
  return values;
}

/**
 * Extractive question answering as the transformers pipeline does it: the question and the
 * context run as a pair; a context longer than `max_seq_len` is read in windows that overlap by
 * `doc_stride` tokens, each one sequence of the batch; each window scores spans of at most
 * `max_answer_len` context tokens by p(start) × p(end); a span is widened to the whole words it
 * touches (`align_to_words`); spans with the same answer text add up; the best answers over all
 * windows win. Offsets are code points into the context.
 */
export function questionAnsweringHead(
  loaded: LoadedModel,
): TaskHead<QuestionAnsweringParameters, QuestionAnsweringInput> {
  const parts = tokenizerParts(loaded.tokenizer);
  return {
    encode: (input, parameters, engine) => contextWindows(input, parameters, engine, loaded.maxLength, parts),
    decode: windowAnswers,
    combine: (windowsAnswers, input, parameters) => bestAnswers(windowsAnswers as WindowAnswers[], input, parameters),
  };
}

/**
 * The question paired with each window of the context, one sequence each. Refuses a question that
 * leaves the context no room, and a context of more than MAX_WINDOWS windows.
 */
function contextWindows(
  input: QuestionAnsweringInput,
  parameters: QuestionAnsweringParameters,
  engine: Engine,
  maxLength: number,
  parts: TokenizerParts,
): Encoded[] {
  const maxSeqLen = Math.min(parameters.max_seq_len ?? 384, maxLength);
  const question = engine.leadingPieces(input.question, parameters.max_question_len ?? 64);
  const context = engine.pieces(input.context);
  const size = maxSeqLen - question.length - engine.specialTokens(true);
  const stride = parameters.doc_stride ?? Math.min(Math.floor(maxSeqLen / 2), 128);
  if (size <= 0)
    throw new ApiError(
      'validation',
      `the question leaves no room for the context in ${maxSeqLen} tokens (max_seq_len); shorten it`,
    );
  if (stride >= size) {
    throw new ApiError(
      'validation',
      `doc_stride (${stride}) must be less than the context tokens each window holds (${size}: max_seq_len less the question)`,
    );
  }
  if (context.length === 0) throw new ApiError('validation', 'the context has no tokens');
  const starts = windows(context.length, size, stride);
  if (starts.length > MAX_WINDOWS) {
    throw new ApiError(
      'payload_too_large',
      `the context is ${context.length} tokens: ${starts.length} windows of ${size}; at most ${MAX_WINDOWS} windows are read per question`,
    );
  }
  const alignment = alignWords(input.context, context, parts);
  return starts.map((from) => {
    const slice = context.slice(from, from + size);
    const built = engine.build(question, slice);
    const note: ContextWindow = { at: built.at, from, length: slice.length, alignment };
    return { text: input.question, ids: built.ids, typeIds: built.typeIds, note };
  });
}

/** One window's best spans, as code-point offsets into the context, and its "no answer" score. */
function windowAnswers(
  output: BatchOutput,
  index: number,
  encoded: Encoded,
  parameters: QuestionAnsweringParameters,
): WindowAnswers {
  const width = output.dims[1];
  const { at, from, length, alignment } = encoded.note as ContextWindow;
  const n = encoded.ids.length;
  const inContext = (i: number) => i >= at && i < at + length;
  // [CLS] stays in the softmax (it is the "no answer" score), as the pipeline's p_mask leaves it.
  const allowed = (i: number) => i === 0 || inContext(i);
  const starts = maskedSoftmax(output.data.subarray(index * width, (index + 1) * width), n, allowed);
  const ends = maskedSoftmax(output.endLogits!.subarray(index * width, (index + 1) * width), n, allowed);
  const nullScore = starts[0] * ends[0];
  const maxLen = parameters.max_answer_len ?? 15;
  const keep = (parameters.top_k ?? 1) * 2 + 10;
  const best: Array<{ score: number; s: number; e: number }> = [];
  for (let s = at; s < at + length; s++) {
    for (let e = s; e < Math.min(s + maxLen, at + length); e++) {
      const score = starts[s] * ends[e];
      if (best.length === keep && score <= best[keep - 1].score) continue;
      best.splice(sortedIndex(best, score), 0, { score, s, e });
      if (best.length > keep) best.pop();
    }
  }
  const alignToWords = parameters.align_to_words ?? true;
  const charSpan = (token: number, side: 0 | 1): number => {
    const t = token - at + from;
    const word = alignment.words[t];
    const span: Span | null = alignToWords && word !== null ? alignment.wordSpans[word] : alignment.spans[t];
    return span ? span[side] : 0;
  };
  return {
    nullScore,
    candidates: best.map(({ score, s, e }) => ({ score, start: charSpan(s, 0), end: charSpan(e, 1) })),
  };
}

/** The best answers over all of a question's windows: the top one, or the `top_k` best. */
function bestAnswers(
  windowsAnswers: WindowAnswers[],
  input: QuestionAnsweringInput,
  parameters: QuestionAnsweringParameters,
) {
  // Spans that give the same answer (ignoring case) are one answer: their scores add up.
  const byText = new Map<string, Candidate & { answer: string }>();
  const slice = codePointSlicer(input.context);
  for (const candidate of windowsAnswers.flatMap((w) => w.candidates)) {
    const answer = slice([candidate.start, candidate.end]);
    const key = answer.toLowerCase();
    const seen = byText.get(key);
    if (seen) seen.score += candidate.score;
    else byText.set(key, { ...candidate, answer });
  }
  const answers = [...byText.values()];
  if (parameters.handle_impossible_answer) {
    answers.push({ score: Math.min(...windowsAnswers.map((w) => w.nullScore)), start: 0, end: 0, answer: '' });
  }
  const topK = parameters.top_k ?? 1;
  const ranked = answers
    .sort((a, b) => b.score - a.score)
    .slice(0, topK)
    .map(({ score, start, end, answer }) => ({ score, start, end, answer }));
  return topK === 1 ? ranked[0] : ranked;
}

/** Where `score` goes in a list sorted highest first. */
function sortedIndex(list: Array<{ score: number }>, score: number): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (list[mid].score >= score) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
