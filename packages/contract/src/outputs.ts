import { z } from 'zod';
import type { Task } from './schemas.js';

/**
 * What a worker answers for one input of each task, as the Inference API and the transformers
 * pipelines shape it. The OpenAPI document (apps/gateway/src/ops/openapi.ts) describes the task routes'
 * answers from these, and its contract test checks real answers against them.
 */

const d = (description: string) => ({ description });
/** A character offset into the input, or null where the token cannot be located in it. */
const offset = z.number().int().min(0).nullable();

const labelScore = z.strictObject({ label: z.string(), score: z.number() });
const fillMaskCandidate = z.strictObject({
  score: z.number(),
  token: z.number().int(),
  token_str: z.string(),
  sequence: z.string(),
});
const entityGroup = z.strictObject({
  entity_group: z.string(),
  score: z.number(),
  word: z.string(),
  start: offset,
  end: offset,
});
const entityToken = z.strictObject({
  entity: z.string(),
  score: z.number(),
  index: z.number().int(),
  word: z.string(),
  start: offset,
  end: offset,
});
const answer = z.strictObject({
  score: z.number(),
  start: z.number().int(),
  end: z.number().int(),
  answer: z.string(),
});
const vector = z.array(z.number());

export const taskOutputSchemas = {
  'text-classification': z.array(labelScore).meta(d('labels with their scores, highest first (top_k of them)')),
  'fill-mask': z
    .union([z.array(fillMaskCandidate), z.array(z.array(fillMaskCandidate))])
    .meta(d('candidates for the mask, best first; a list of them per mask when the input holds several')),
  'feature-extraction': z
    .union([vector, z.array(vector)])
    .meta(d('the pooled embedding, or one vector per token with pooling "none"')),
  'token-classification': z
    .union([z.array(entityGroup), z.array(entityToken)])
    .meta(d('entities: grouped (aggregation_strategy other than "none") or one per token')),
  'question-answering': z
    .union([answer, z.array(answer)])
    .meta(d('the best answer, or the top_k best when top_k is over 1')),
  'zero-shot-classification': z.strictObject({
    sequence: z.string(),
    labels: z.array(z.string()),
    scores: z.array(z.number()),
  }),
  'sentence-similarity': vector.meta(d("each sentence's similarity to source_sentence")),
} satisfies Record<Task, z.ZodType>;
