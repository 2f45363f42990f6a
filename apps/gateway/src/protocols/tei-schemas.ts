import { z } from 'zod';
import { ApiError, describeIssues, parseLenient, TASKS, tokenIdSchema, type ErrorType } from '@tserve/contract';
import { BodyTooLarge, type ErrorFormat } from '../http/http-errors.js';
import { EMBEDDING_TYPES, type EmbeddingType } from '../serving/compact-vectors.js';

/** The shapes of TEI's bodies: what its routes parse (`parse`), and what the OpenAPI document describes. */

const errorBody = z.strictObject({
  error: z.string(),
  error_type: z.string().meta({ description: 'Validation, Empty, Overloaded, Unhealthy, Backend, …' }),
});
type ErrorBody = z.infer<typeof errorBody>;

const text = z.string({ error: 'each input must be a string' }).min(1, 'inputs must not contain empty strings');
const texts = z.union([text, z.array(text).min(1, 'inputs must not be an empty list')], {
  error: (issue) => (issue.input === undefined ? 'inputs is required' : 'inputs must be a string or a list of strings'),
});
const direction = z.enum(['Right', 'Left', 'right', 'left']).transform((d) => d.toLowerCase() as 'right' | 'left');
/** TEI cuts nothing unless asked; `Left` keeps the last tokens (each text of a pair alike). */
const truncation = { truncate: z.boolean().default(false), truncation_direction: direction.optional() };
/** One of the model's named prompts, put before each input; null or absent: its default prompt. */
const prompt_name = z
  .string()
  .min(1)
  .nullable()
  .optional()
  .transform((v) => v ?? undefined);
/** A body's model choice, for when several served models fit the route. */
const model = z.string().min(1).optional();

export const embedRequest = z
  .object({
    inputs: texts,
    normalize: z.boolean().default(true),
    ...truncation,
    prompt_name,
    dimensions: z.number().int().min(1).nullable().optional(),
    // base64 is left to OpenAI's and Cohere's routes: TEI's answer stays a list of number lists.
    embedding_type: z
      .enum(EMBEDDING_TYPES.filter((t) => t !== 'base64') as [EmbeddingType, ...EmbeddingType[]])
      .default('float')
      .meta({
        description:
          "not TEI's: each vector as Cohere's compact types, lists of integers: int8, uint8, binary, ubinary (docs/api/tei.md)",
      }),
    model,
  })
  .strict();

/**
 * TEI's `/embed_all` (each token's vector, as the model gives it) and `/embed_sparse` (a sparse
 * vector from a masked-LM model with SPLADE pooling) take the same body.
 */
const unpooledRequest = z
  .object({
    inputs: texts,
    ...truncation,
    prompt_name,
    model,
  })
  .strict();
export const embedAllRequest = unpooledRequest;
export const embedSparseRequest = unpooledRequest;

const pair = z.tuple([text, text]);
const sequence = z.union([text, pair]);
export const predictRequest = z
  .object({
    inputs: z.union([text, pair, z.array(sequence).min(1, 'inputs must not be an empty list')], {
      error: (issue) =>
        issue.input === undefined
          ? 'inputs is required'
          : 'inputs must be a string, a pair [text, text_pair], or a list of those',
    }),
    raw_scores: z.boolean().default(false),
    ...truncation,
    model,
  })
  .strict();

/** A document of the Jina/Cohere shape: a string, or an object whose `text` is ranked and whose other fields come back with it. */
const document = z.union([text, z.looseObject({ text })], {
  error: 'each document must be a string or an object with a "text" string',
});
const topN = z.number().int().min(1, 'top_n must be a positive integer').nullable().optional();

/**
 * TEI's `/rerank` takes `texts` and answers TEI's list; with `documents` in their place it takes the
 * body Infinity, vLLM, Jina and llama.cpp take, and answers in their shape (`results`). Both take
 * `top_n` and `return_documents` (TEI's `return_text`).
 */
export const rerankRequest = z
  .object({
    query: text,
    texts: z.array(text, { error: 'texts must be a list of strings' }).min(1, 'texts must not be empty').optional(),
    documents: z
      .array(document, { error: 'documents must be a list' })
      .min(1, 'documents must not be empty')
      .optional(),
    raw_scores: z.boolean().default(false),
    return_text: z.boolean().default(false),
    return_documents: z.boolean().optional(),
    top_n: topN,
    truncate: z.boolean().optional(),
    truncation_direction: direction.optional(),
    model,
  })
  .strict()
  .superRefine((body, ctx) => {
    if ((body.texts === undefined) === (body.documents === undefined))
      ctx.addIssue({ code: 'custom', message: 'send either texts (TEI) or documents (Jina, Cohere, Infinity)' });
  });

export const tokenizeRequest = z
  .object({
    inputs: texts,
    add_special_tokens: z.boolean().default(true),
    prompt_name,
    model,
  })
  .strict();

/** TEI's `ids`: one sequence's token ids, or a list of sequences (an empty list is one empty sequence). */
export const decodeRequest = z
  .object({
    ids: z.union([z.array(tokenIdSchema), z.array(z.array(tokenIdSchema)).min(1)], {
      error: (issue) =>
        issue.input === undefined ? 'ids is required' : 'ids must be a list of token ids, or a list of such lists',
    }),
    skip_special_tokens: z.boolean().default(true),
    model,
  })
  .strict();

/** TEI's `/similarity`: a source sentence and the sentences to compare with it, embedded as `/embed` does. */
export const similarityRequest = z
  .object({
    inputs: z.strictObject(
      {
        source_sentence: text,
        sentences: z.array(text, { error: 'inputs.sentences must be a list of strings' }),
      },
      {
        error: (issue) =>
          issue.input === undefined
            ? 'inputs is required'
            : 'inputs must be {"source_sentence": text, "sentences": [text, ...]}',
      },
    ),
    parameters: z
      .object({
        truncate: z
          .boolean()
          .nullable()
          .optional()
          .transform((v) => v ?? false),
        truncation_direction: direction.optional(),
        prompt_name,
      })
      .strict()
      .nullable()
      .optional(),
    model,
  })
  .strict();

/** Vertex AI's prediction body: each instance a TEI body (docs/api/tei.md, "Managed platforms"). */
export const vertexRequest = z
  .object({
    instances: z.array(z.unknown(), { error: 'must be a list of TEI bodies' }).min(1, 'must not be empty').meta({
      description: "each a body of /rerank (query and texts), or of the model's own route (/embed, /predict)",
    }),
  })
  .strict();
export const vertexResponse = z.strictObject({
  predictions: z.array(z.unknown()).meta({ description: "each instance's answer, as its TEI route answers it" }),
});

const labelScores = z.array(z.strictObject({ label: z.string(), score: z.number() }));
const offset = z
  .number()
  .int()
  .min(0)
  .nullable()
  .meta({ description: 'UTF-8 byte offset into the input; null for a special token' });
const tokenInfo = z.strictObject({
  id: z.number().int(),
  text: z.string(),
  special: z.boolean(),
  start: offset,
  stop: offset,
});
export const rankedText = z.strictObject({ index: z.number().int(), score: z.number(), text: z.string().optional() });
/** `/rerank`'s answer to a body with `documents`: the shape Infinity, vLLM and Jina answer in. */
export const rankedDocuments = z.strictObject({
  id: z.string(),
  object: z.literal('rerank'),
  model: z.string(),
  results: z
    .array(
      z.strictObject({
        index: z.number().int(),
        relevance_score: z.number(),
        document: z.looseObject({ text: z.string() }).optional(),
      }),
    )
    .meta({ description: 'the documents by score, highest first' }),
  usage: z.strictObject({ prompt_tokens: z.number().int(), total_tokens: z.number().int() }),
  created: z.number().int(),
});
const labelMap = z.strictObject({
  id2label: z.record(z.string(), z.string()),
  label2id: z.record(z.string(), z.number().int()),
});
export const info = z.strictObject({
  model_id: z.string(),
  model_sha: z.string().nullable(),
  model_weights_sha256: z.string().nullable(),
  served_model_name: z.string(),
  model_dtype: z.string(),
  warning: z.string().optional().meta({
    description: 'served in a dtype whose answers shift with their batch mates (q8): says so, and what to do',
  }),
  model_dtype_fallback: z.string().optional().meta({ description: 'why int8-row (DTYPE=auto) does not run' }),
  model_type: z.union([
    z.strictObject({ reranker: labelMap }),
    z.strictObject({ classifier: labelMap }),
    z.strictObject({
      embedding: z.strictObject({
        pooling: z.string().meta({ description: 'cls, mean, last_token, max, ... (joined by +), or splade' }),
      }),
    }),
  ]),
  sentence_transformers: z
    .strictObject({
      pooling: z.array(z.string()),
      include_prompt: z.boolean(),
      dense: z.array(z.string()).meta({ description: 'Dense modules after the pooling, run in the ONNX graph' }),
      normalize: z.boolean(),
      max_seq_length: z.number().int(),
      padding_side: z.enum(['left', 'right']),
      prompts: z.record(z.string(), z.string()),
      default_prompt: z.string(),
    })
    .optional()
    .meta({ description: "how the model makes its embedding, from its sentence-transformers folder's modules.json" }),
  matryoshka_dimensions: z.array(z.number().int()).optional().meta({
    description:
      "an embedding model's: the sizes its vectors may be shortened to (MATRYOSHKA_DIMENSIONS), which Cohere's output_dimension takes",
  }),
  task: z.enum(TASKS),
  tasks: z.array(z.enum(TASKS)),
  max_concurrent_requests: z.number().int(),
  max_input_length: z.number().int(),
  max_batch_tokens: z.number().int(),
  max_batch_requests: z.number().int(),
  max_client_batch_size: z.number().int(),
  auto_truncate: z.boolean(),
  tokenization_workers: z.number().int(),
  version: z.string(),
});

/** The shapes of this protocol's bodies, for the OpenAPI document. */
export const teiSchemas = {
  embedRequest,
  embedResponse: z
    .array(z.array(z.number()))
    .meta({ description: 'a vector per input: floats, or the integers of a compact embedding_type' }),
  embedSparseRequest,
  embedSparseResponse: z
    .array(z.array(z.strictObject({ index: z.number().int(), value: z.number() })))
    .meta({ description: 'for each input, its non-zero vocabulary entries, by index' }),
  embedAllRequest,
  embedAllResponse: z.array(z.array(z.array(z.number()))).meta({
    description: "for each input, each token's vector (special tokens included), neither pooled nor normalised",
  }),
  predictRequest,
  predictResponse: z
    .union([labelScores, z.array(labelScores)])
    .meta({ description: 'one input: its labels; a batch: a list of them' }),
  rerankRequest,
  rerankResponse: z.union([
    z.array(rankedText).meta({ description: 'to a body with texts: the texts by score, highest first' }),
    rankedDocuments,
  ]),
  tokenizeRequest,
  tokenizeResponse: z.array(z.array(tokenInfo)),
  decodeRequest,
  decodeResponse: z.array(z.string()).meta({ description: 'the text of each sequence of ids' }),
  similarityRequest,
  similarityResponse: z
    .array(z.number())
    .meta({ description: "each sentence's cosine similarity to the source sentence, in order" }),
  info,
  vertexRequest,
  vertexResponse,
  error: errorBody,
};

/** Empty inputs: TEI's own error type, answered 400. */
class EmptyInput extends ApiError {
  constructor(message: string) {
    super('validation', message);
  }
}

const TEI_TYPES: Partial<Record<ErrorType, string>> = {
  validation: 'Validation',
  payload_too_large: 'Validation',
  overloaded: 'Overloaded',
  rate_limited: 'Overloaded',
  unavailable: 'Unhealthy',
  inference: 'Backend',
  timeout: 'Backend',
  internal: 'Backend',
};
/**
 * TEI (1.9+) answers input errors, too-large batches included, with 422, and overload with 429. A
 * body over its payload limit is refused by its HTTP layer (axum) with 413: so is one over MAX_BODY_BYTES.
 */
const TEI_STATUS: Partial<Record<ErrorType, number>> = {
  validation: 422,
  payload_too_large: 422,
  overloaded: 429,
  inference: 424,
};

/** TEI's error body: `{"error", "error_type"}`, with TEI's type names and statuses. */
export const teiErrors: ErrorFormat = (error) =>
  error instanceof EmptyInput
    ? { status: 400, body: { error: error.message, error_type: 'Empty' } satisfies ErrorBody }
    : {
        status: error instanceof BodyTooLarge ? 413 : (TEI_STATUS[error.type] ?? error.status),
        body: { error: error.message, error_type: TEI_TYPES[error.type] ?? error.type } satisfies ErrorBody,
      };

/** A field of a body by its dotted path (`inputs.sentences`); undefined where the body lacks it. */
const fieldOf = (body: unknown, path: string) =>
  path
    .split('.')
    .reduce<unknown>(
      (v, key) => (typeof v === 'object' && v !== null ? (v as Record<string, unknown>)[key] : undefined),
      body,
    );

/** TEI refuses an empty input or list as `Empty` before anything else. */
function refuseEmpty(body: unknown, fields: string[]): void {
  for (const field of fields) {
    const value = fieldOf(body, field);
    if (value === '' || (Array.isArray(value) && (value.length === 0 || value.includes(''))))
      throw new EmptyInput(`\`${field}\` cannot be empty`);
  }
}

/** The fields TEI refuses as `Empty` on its routes; `/similarity` names its own (SIMILARITY_TEXTS). */
const TEXTS = ['inputs', 'texts', 'documents', 'query'];
export const SIMILARITY_TEXTS = ['inputs', 'inputs.source_sentence', 'inputs.sentences'];

/**
 * A body parsed against its route's schema, its `empty` fields (dotted paths) first refused as TEI
 * does. Fields the schema does not know are left out, and `ignored` is told their names.
 */
export function parse<T extends z.ZodType>(
  schema: T,
  body: unknown,
  ignored: (fields: string[]) => void = () => {},
  empty = TEXTS,
): z.output<T> {
  if (body === undefined) throw new ApiError('validation', 'send a JSON body with Content-Type: application/json');
  refuseEmpty(body, empty);
  const parsed = parseLenient(schema, body);
  if (!parsed.success) throw new ApiError('validation', describeIssues(parsed.error));
  ignored(parsed.ignored);
  return parsed.data;
}
