import { z } from 'zod';
import { SCORE_FUNCTIONS } from './score-functions.js';

/** The wire contract: what clients may send, validated once at the gateway's edge. */

export const TASKS = [
  'text-classification',
  'fill-mask',
  'feature-extraction',
  'token-classification',
  'question-answering',
  'zero-shot-classification',
  'sentence-similarity',
] as const;
export type Task = (typeof TASKS)[number];

/**
 * What a worker can be asked to do: a task; only tokenize or decode (TEI's /tokenize and
 * /decode), which run no model; or a sparse vector (TEI's /embed_sparse) from a masked-LM model
 * that serves them.
 */
export type Operation = Task | 'tokenize' | 'decode' | 'embed-sparse';

/** Parameters of tokenization alone. */
export interface TokenizeParameters {
  add_special_tokens?: boolean;
  prompt_name?: string;
}

/** Parameters of decoding token ids into text. */
export interface DecodeParameters {
  /** Leave out special tokens ([CLS], [SEP], padding): TEI's default. */
  skip_special_tokens?: boolean;
}

/** A text and the text it is read with, run as one sequence ([CLS] text [SEP] text_pair [SEP]). */
export interface TextPair {
  text: string;
  text_pair: string;
}
export interface QuestionAnsweringInput {
  question: string;
  context: string;
}
export interface SentenceSimilarityInput {
  source_sentence: string;
  sentences: string[];
}
/** Token ids of one sequence, to decode into its text. */
export interface TokenIds {
  ids: number[];
}
/** One input of a request, as its task reads it. */
export type TaskInput = string | TextPair | QuestionAnsweringInput | SentenceSimilarityInput | TokenIds;

const nonEmptyText = z.string({ error: 'each input must be a string' }).min(1, 'inputs must not be empty strings');

const field = (name: string) =>
  z
    .string({ error: (issue) => (issue.input === undefined ? `${name} is required` : `${name} must be a string`) })
    .min(1, `${name} must not be empty`);

/** One input or a list of them, as the Inference API accepts; `describe` names the item's shape in errors. */
function oneOrMany<T extends z.ZodType>(item: T, describe: string) {
  return z.union([item, z.array(item).min(1, 'inputs must not be an empty list')], {
    error: (issue) =>
      issue.input === undefined ? 'inputs is required' : `inputs must be ${describe} or a list of them`,
  });
}

const inputsSchema = oneOrMany(nonEmptyText, 'a non-empty string');

const textPairSchema = z.object({ text: field('text'), text_pair: field('text_pair').optional() }).strict();
const questionAnsweringSchema = z.object({ question: field('question'), context: field('context') }).strict();
const sentenceSimilaritySchema = z
  .object({
    source_sentence: field('source_sentence'),
    sentences: z
      .array(field('each sentence'), { error: 'sentences must be a list of strings' })
      .min(1, 'sentences must not be empty'),
  })
  .strict();
/** A token id, as Hugging Face tokenizers hold one (32 bits, unsigned). */
export const tokenIdSchema = z
  .number({ error: 'each id must be a number' })
  .int('ids must be whole numbers')
  .min(0, 'ids must not be negative')
  .max(2 ** 32 - 1, 'ids must fit in 32 bits');
const tokenIdsSchema = z.object({ ids: z.array(tokenIdSchema, { error: 'ids must be a list of token ids' }) }).strict();

/**
 * What `inputs` may be for each task, as the Inference API defines it. A text-classification input
 * may be a pair (`{text, text_pair}`) for cross-encoders and NLI models.
 */
export const taskInputSchemas = {
  'text-classification': oneOrMany(
    z.union([nonEmptyText, textPairSchema]),
    'a non-empty string or {"text", "text_pair"}',
  ),
  'fill-mask': inputsSchema,
  'feature-extraction': inputsSchema,
  'token-classification': inputsSchema,
  'zero-shot-classification': inputsSchema,
  'question-answering': oneOrMany(questionAnsweringSchema, '{"question", "context"}'),
  'sentence-similarity': sentenceSimilaritySchema,
  tokenize: inputsSchema,
  decode: oneOrMany(tokenIdsSchema, '{"ids"}'),
  'embed-sparse': inputsSchema,
} satisfies Record<Operation, z.ZodType>;

/** Reads one input of any task: an object with text_pair stays a pair, a pair without it is its text. */
export function normalizeInput(
  input: string | { text: string; text_pair?: string } | QuestionAnsweringInput | SentenceSimilarityInput | TokenIds,
): TaskInput {
  if (typeof input === 'object' && 'text' in input)
    return input.text_pair === undefined ? input.text : { text: input.text, text_pair: input.text_pair };
  return input;
}

/** Which task an Inference API body asks for when its inputs' shape says so; undefined for plain texts. */
export function taskOfInputs(inputs: unknown): Task | undefined {
  const first: unknown = Array.isArray(inputs) ? inputs[0] : inputs;
  if (typeof first !== 'object' || first === null) return undefined;
  if ('source_sentence' in first || 'sentences' in first) return 'sentence-similarity';
  if ('question' in first || 'context' in first) return 'question-answering';
  if ('text_pair' in first) return 'text-classification';
  return undefined;
}

/** Shared by every task: long inputs are cut to the model's length unless a client says otherwise. */
const common = {
  truncation: z.boolean().optional(),
};

/**
 * Fill-mask candidates one input may ask for: masks x top_k. One mask takes top_k up to it; an input
 * of hundreds of masks, each decoded top_k times, would hold its worker for minutes.
 */
export const FILL_MASK_MOST_CANDIDATES = 1000;

/** Keep the last tokens instead of the first when cutting (TEI's truncation_direction); each text of a pair alike. */
const truncationDirection = z.enum(['right', 'left']).optional();

/** One of the model's named prompts (config_sentence_transformers.json), put before each input. */
const promptName = z.string().min(1, 'prompt_name must not be empty').optional();

export const parameterSchemas = {
  'text-classification': z
    .object({
      ...common,
      top_k: z.number().int().min(1).nullable().optional(),
      function_to_apply: z.enum(SCORE_FUNCTIONS).optional(),
      truncation_direction: truncationDirection,
      /** Most tokens kept of a pair's `text_pair` before the pair is cut to the model's length (a rerank document's own limit). */
      text_pair_max_tokens: z.number().int().min(1).optional(),
    })
    .strict(),
  'fill-mask': z
    .object({
      ...common,
      top_k: z.number().int().min(1).max(FILL_MASK_MOST_CANDIDATES).optional(),
    })
    .strict(),
  'token-classification': z
    .object({
      ...common,
      aggregation_strategy: z.enum(['none', 'simple', 'first', 'average', 'max']).optional(),
      ignore_labels: z.array(z.string()).optional(),
    })
    .strict(),
  'feature-extraction': z
    .object({
      ...common,
      normalize: z.boolean().optional(),
      pooling: z.enum(['mean', 'cls', 'none']).optional(),
      truncation_direction: truncationDirection,
      prompt_name: promptName,
    })
    .strict(),
  'question-answering': z
    .object({
      top_k: z.number().int().min(1).max(100).optional(),
      doc_stride: z.number().int().min(0).optional(),
      max_answer_len: z.number().int().min(1).optional(),
      max_seq_len: z.number().int().min(8).optional(),
      max_question_len: z.number().int().min(1).optional(),
      handle_impossible_answer: z.boolean().optional(),
      align_to_words: z.boolean().optional(),
    })
    .strict(),
  'zero-shot-classification': z
    .object({
      ...common,
      // The Inference API also takes one comma-separated string.
      candidate_labels: z
        .union([z.string(), z.array(z.string().min(1, 'candidate labels must not be empty strings'))], {
          error: (issue) =>
            issue.input === undefined ? 'candidate_labels is required' : 'candidate_labels must be a list of strings',
        })
        .transform((labels) =>
          typeof labels === 'string'
            ? labels
                .split(',')
                .map((l) => l.trim())
                .filter(Boolean)
            : labels,
        )
        .pipe(z.array(z.string()).min(1, 'give at least one candidate label')),
      multi_label: z.boolean().optional(),
      hypothesis_template: z
        .string()
        .refine((t) => t.includes('{}'), 'hypothesis_template must contain "{}", where each candidate label goes')
        .optional(),
    })
    .strict(),
  'sentence-similarity': z.object({ ...common }).strict(),
  tokenize: z.object({ add_special_tokens: z.boolean().optional(), prompt_name: promptName }).strict(),
  decode: z.object({ skip_special_tokens: z.boolean().optional() }).strict(),
  'embed-sparse': z.object({ ...common, truncation_direction: truncationDirection, prompt_name: promptName }).strict(),
} satisfies Record<Operation, z.ZodType>;

export type TextClassificationParameters = z.infer<(typeof parameterSchemas)['text-classification']>;
export type FillMaskParameters = z.infer<(typeof parameterSchemas)['fill-mask']>;
export type TokenClassificationParameters = z.infer<(typeof parameterSchemas)['token-classification']>;
export type FeatureExtractionParameters = z.infer<(typeof parameterSchemas)['feature-extraction']>;
export type QuestionAnsweringParameters = z.infer<(typeof parameterSchemas)['question-answering']>;
export type ZeroShotParameters = z.output<(typeof parameterSchemas)['zero-shot-classification']>;
export type SentenceSimilarityParameters = z.infer<(typeof parameterSchemas)['sentence-similarity']>;
export type SparseParameters = z.infer<(typeof parameterSchemas)['embed-sparse']>;
export type TaskParameters =
  | TextClassificationParameters
  | FillMaskParameters
  | TokenClassificationParameters
  | FeatureExtractionParameters
  | QuestionAnsweringParameters
  | ZeroShotParameters
  | SentenceSimilarityParameters
  | SparseParameters
  | TokenizeParameters
  | DecodeParameters;

/**
 * Sequences the model runs for one input: what a request costs, counted against
 * MAX_INPUTS_PER_REQUEST and the workers' batch size. A question over a long context may run
 * as several spans; it counts one here, and the worker bounds its spans.
 */
export function sequencesOf(task: Operation, input: TaskInput, parameters: TaskParameters): number {
  if (task === 'zero-shot-classification') return (parameters as ZeroShotParameters).candidate_labels.length;
  if (task === 'sentence-similarity') return 1 + (input as SentenceSimilarityInput).sentences.length;
  return 1;
}

/**
 * The priority classes, who goes first: workers take interactive requests before bulk ones, and
 * admission sheds bulk ones first. The bulk class is spelled `batch` where clients name it
 * (`x-priority`, `options.priority`, an API key's `priority`): `BULK` is that spelling.
 */
export const PRIORITIES = ['interactive', 'batch'] as const;
export type Priority = (typeof PRIORITIES)[number];
/** The bulk class, as clients spell it. */
export const BULK = 'batch' satisfies Priority;

/** The Inference API body's `options`. */
export const optionsSchema = z
  .object({
    /** A client may shorten its deadline, never lengthen it past the server's. */
    timeout_ms: z.number().int().min(1).optional(),
    /** May lower the class an API key gives, never raise it. */
    priority: z.enum(PRIORITIES).optional(),
    /** Wait while the model loads instead of answering 503 at once. */
    wait_for_model: z.boolean().optional(),
    /** false: compute afresh, bypassing the response cache (when RESPONSE_CACHE_TTL_S turns it on). */
    use_cache: z.boolean().optional(),
  })
  .strict();

/** The Hugging Face Inference API body. `parameters` is checked per task once the model's task is known. */
export const inferenceRequestSchema = z
  .object({
    // Checked per task (taskInputSchemas) once the model's task is known.
    inputs: z.unknown().refine((v) => v !== undefined, 'inputs is required'),
    parameters: z.record(z.string(), z.unknown()).optional(),
    options: optionsSchema.optional(),
  })
  .strict();
