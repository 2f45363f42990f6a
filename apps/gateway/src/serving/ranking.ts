import type { InferenceResult } from './inference.js';
import type { CallBody } from './envelope.js';

/** How texts are ranked against a query. */
export interface RankOptions {
  /** Cut each (query, text) pair to the model's length, longest first. */
  truncate: boolean;
  /** Keep the last tokens instead of the first when cutting. */
  direction?: 'right' | 'left';
  /** Logits instead of sigmoid scores. */
  rawScores: boolean;
  /** Most tokens kept of each text before its pair is cut (Cohere's `max_tokens_per_doc`). */
  textMaxTokens?: number;
}

/** A text's place in the request and its score. */
export interface Rank {
  index: number;
  score: number;
}

/**
 * Texts ranked against a query by a reranker (a classifier with one label), best first: TEI's
 * `/rerank` and Cohere's rerank make this one call (`rankingCall`) and read its answer (`ranksOf`).
 * Each (query, text) pair is one sequence of the worker's batches.
 */
export function rankingCall(
  model: string,
  query: string,
  texts: string[],
  options: RankOptions,
): CallBody & { task: 'text-classification' } {
  return {
    model,
    task: 'text-classification',
    inputs: texts.map((text) => ({ text: query, text_pair: text })),
    parameters: {
      truncation: options.truncate,
      truncation_direction: options.direction,
      function_to_apply: options.rawScores ? 'none' : 'sigmoid',
      ...(options.textMaxTokens !== undefined ? { text_pair_max_tokens: options.textMaxTokens } : {}),
    },
  };
}

/** A ranking call's answer: each text's rank, best first. */
export function ranksOf(result: InferenceResult): Rank[] {
  return (result.outputs as Array<Array<{ score: number }>>)
    .map((scores, index) => ({ index, score: scores[0].score }))
    .sort((a, b) => b.score - a.score);
}
