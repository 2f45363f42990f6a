import type { InferenceResult } from './inference.js';
import type { Caller } from './route-call.js';

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
 * `/rerank` and Cohere's rerank run this one call. Each (query, text) pair is one sequence of the
 * worker's batches.
 */
export async function rankTexts(
  caller: Caller,
  model: string,
  query: string,
  texts: string[],
  options: RankOptions,
): Promise<{ ranks: Rank[]; timing: InferenceResult['timing']; tokens: number }> {
  const result = await caller.run({
    model,
    task: 'text-classification',
    inputs: texts.map((text) => ({ text: query, text_pair: text })),
    parameters: {
      truncation: options.truncate,
      truncation_direction: options.direction,
      function_to_apply: options.rawScores ? 'none' : 'sigmoid',
      ...(options.textMaxTokens !== undefined ? { text_pair_max_tokens: options.textMaxTokens } : {}),
    },
  });
  const ranks = (result.outputs as Array<Array<{ score: number }>>)
    .map((scores, index) => ({ index, score: scores[0].score }))
    .sort((a, b) => b.score - a.score);
  return { ranks, timing: result.timing, tokens: result.tokens };
}
