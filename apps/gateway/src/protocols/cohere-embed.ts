import type { IRouter } from 'express';
import { z } from 'zod';
import { ApiError } from '@tserve/contract';
import { errorHandler } from '../http/http-errors.js';
import { requestIdOf } from '../http/request-id.js';
import { readLenient } from '../http/ignored-fields.js';
import { jsonBody } from '../http/request-body.js';
import { answerHeaders, httpEnvelope, inferenceRequest, type ProtocolParts } from '../serving/envelope.js';
import { checkKind, EMBEDDING, ModelChoice } from '../serving/model-choice.js';
import { ModelNames } from '../serving/model-names.js';
import { shorten } from '../serving/embedding-dimensions.js';
import { compactVector, EMBEDDING_TYPES, type EmbeddingType } from '../serving/compact-vectors.js';
import type { ServedModel } from '../serving/served-models.js';
import { cohereErrors } from './cohere.js';

/**
 * Cohere's embed API (`POST /v2/embed`, and `POST /v1/embed`), so that Cohere's clients and the
 * frameworks' Cohere embeddings work pointed at the gateway: texts in, each vector in the types
 * asked for (`embedding_types`: float, int8, uint8, binary, ubinary, base64; serving/compact-vectors.ts).
 * `input_type` picks the model's named prompt (PROMPTS_OF).
 */

/**
 * The model's prompts each `input_type` stands for, by name (any case), the first the model has:
 * what sentence-transformers' models call their query and document prompts. A model with no
 * prompts embeds every input type alike; one with prompts and none of these refuses the type.
 */
const PROMPTS_OF = {
  search_query: ['query', 'search_query'],
  search_document: ['document', 'passage', 'search_document'],
  classification: ['classification'],
  clustering: ['clustering'],
} as const;
const INPUT_TYPES = [...(Object.keys(PROMPTS_OF) as Array<keyof typeof PROMPTS_OF>), 'image'] as const;

const text = z.string({ error: 'must be a string' }).min(1, 'must not be an empty string');
const content = z.discriminatedUnion(
  'type',
  [
    z.object({ type: z.literal('text'), text }).strict(),
    z.object({ type: z.literal('image_url'), image_url: z.unknown() }).strict(),
  ],
  { error: 'must be {"type": "text", "text": ...}' },
);
const embedRequest = z
  .object({
    model: z.string().min(1).optional().meta({
      description: 'a served model, or an alias (MODEL_ALIASES); optional when one embedding model is served',
    }),
    texts: z
      .array(text, { error: 'must be a list of strings' })
      .min(1, 'must not be empty')
      .optional()
      .meta({ description: 'the texts to embed (or inputs)' }),
    inputs: z
      .array(
        z.object({ content: z.array(content, { error: 'must be a list' }).min(1, 'must not be empty') }).strict(),
        { error: 'must be a list of {"content": [...]}' },
      )
      .min(1, 'must not be empty')
      .optional()
      .meta({ description: "the texts as Cohere's inputs: each input's text parts, joined by a space" }),
    input_type: z
      .enum(INPUT_TYPES, { error: `must be one of ${INPUT_TYPES.join(', ')}` })
      .optional()
      .meta({
        description:
          "the model's prompt for it: search_query: query; search_document: document or passage; classification; clustering. Absent: the model's default prompt",
      }),
    embedding_types: z
      .array(z.enum(EMBEDDING_TYPES, { error: `each must be one of ${EMBEDDING_TYPES.join(', ')}` }), {
        error: 'must be a list',
      })
      .min(1, 'must not be empty')
      .optional()
      .meta({ description: 'the types each vector is answered in; v2: float where absent' }),
    output_dimension: z
      .number({ error: 'must be a positive integer' })
      .int('must be a positive integer')
      .min(1, 'must be a positive integer')
      .optional()
      .meta({ description: "one of the sizes the model's /info lists in matryoshka_dimensions" }),
    truncate: z
      .enum(['NONE', 'START', 'END'], { error: 'must be NONE, START or END' })
      .default('END')
      .meta({ description: 'END keeps the first tokens, START the last; NONE refuses a longer input' }),
    priority: z
      .number()
      .int()
      .min(0)
      .optional()
      .meta({ description: "Cohere's priority, accepted and not used: send x-priority (or a key's class) here" }),
  })
  .strict()
  .superRefine((body, ctx) => {
    if ((body.texts === undefined) === (body.inputs === undefined))
      ctx.addIssue({ code: 'custom', message: 'send either texts or inputs' });
  });

const vectors = z.array(z.array(z.number()));
const byType = z.strictObject({
  float: vectors.optional(),
  int8: vectors.optional().meta({ description: 'round(clamp(v, -1, 1) × 127), each value in [-127, 127]' }),
  uint8: vectors.optional().meta({ description: 'round((clamp(v, -1, 1) + 1) × 127.5), each value in [0, 255]' }),
  binary: vectors.optional().meta({ description: 'the sign bits (v > 0) packed, first value highest, less 128' }),
  ubinary: vectors
    .optional()
    .meta({ description: 'the sign bits (v > 0) packed eight to a byte, first value highest' }),
  base64: z.array(z.string()).optional().meta({ description: 'little-endian float32 bytes, base64' }),
});
const meta = z.strictObject({
  api_version: z.strictObject({ version: z.string() }),
  billed_units: z.strictObject({ input_tokens: z.number().int() }),
});
const embedResponse = z.strictObject({
  response_type: z.literal('embeddings_by_type'),
  id: z.string(),
  embeddings: byType,
  texts: z.array(z.string()),
  meta,
});
const floatsResponse = z.strictObject({
  response_type: z.literal('embeddings_floats'),
  id: z.string(),
  embeddings: vectors,
  texts: z.array(z.string()),
  meta,
});

/** The shapes of these routes' bodies, for the OpenAPI document. */
export const cohereEmbedSchemas = { embedRequest, embedResponse, floatsResponse };

/** The texts of a request: its `texts`, or each input's text parts joined. */
function textsOf(body: z.output<typeof embedRequest>): string[] {
  if (body.texts) return body.texts;
  return (body.inputs ?? []).map((input, i) =>
    input.content
      .map((part, j) => {
        if (part.type === 'text') return part.text;
        throw new ApiError('validation', `inputs.${i}.content.${j}: this server embeds text only`);
      })
      .join(' '),
  );
}

/** The prompt an input type stands for on a model (PROMPTS_OF); undefined: the model's default. */
function promptFor(model: ServedModel, inputType: z.output<typeof embedRequest>['input_type']): string | undefined {
  if (inputType === undefined) return undefined;
  if (inputType === 'image') throw new ApiError('validation', 'input_type: this server embeds text only');
  if (model.promptNames.length === 0) return undefined;
  for (const wanted of PROMPTS_OF[inputType]) {
    const name = model.promptNames.find((n) => n.toLowerCase() === wanted);
    if (name !== undefined) return name;
  }
  throw new ApiError(
    'validation',
    `input_type: model ${model.id} has no prompt for ${inputType} (one named ${PROMPTS_OF[inputType].join(' or ')}); its prompts: ${model.promptNames.join(', ')}`,
  );
}

/** The size output_dimension asks for, where the model may be shortened to it. */
function outputDimension(model: ServedModel, size: number | undefined): number | undefined {
  if (size === undefined) return undefined;
  const sizes = model.matryoshkaDimensions;
  if (sizes.length === 0)
    throw new ApiError(
      'validation',
      `output_dimension: model ${model.id}'s vectors cannot be shortened (its workers name no MATRYOSHKA_DIMENSIONS; see GET /info)`,
    );
  if (!sizes.includes(size))
    throw new ApiError('validation', `output_dimension: must be one of ${sizes.join(', ')} for model ${model.id}`);
  return size;
}

export function cohereEmbedRoutes(router: IRouter, parts: ProtocolParts): void {
  const choice = new ModelChoice(parts.registry);
  const names = new ModelNames(parts.config.MODEL_ALIASES);
  const json = jsonBody(parts.config);
  for (const version of ['1', '2']) {
    const path = `/v${version}/embed`;
    router.post(
      path,
      parts.admission.beforeBody((req) => choice.pickBeforeBody(req.get('x-model'), EMBEDDING)),
      json,
      async (req, res) => {
        const body = readLenient(embedRequest, req, res);
        const envelope = httpEnvelope(req, res, parts.config.REQUEST_TIMEOUT_MS);
        const id = choice.pick(req.get('x-model'), EMBEDDING, body.model && names.resolve(body.model));
        // Its texts and parameters depend on the model (its prompts and sizes): filled in once it is known.
        const request = inferenceRequest(envelope, { model: id, task: 'feature-extraction', inputs: [] });
        const model = checkKind(await parts.service.modelFor(request), EMBEDDING);
        const texts = textsOf(body);
        const promptName = promptFor(model.served, body.input_type);
        const dimensions = outputDimension(model.served, body.output_dimension);
        request.inputs = texts;
        request.parameters = {
          truncation: body.truncate !== 'NONE',
          ...(body.truncate === 'START' ? { truncation_direction: 'left' } : {}),
          ...(promptName !== undefined ? { prompt_name: promptName } : {}),
        };
        const result = await parts.service.infer(request, model);
        answerHeaders(res, envelope, result);
        const full = result.outputs as number[][];
        // A MATRYOSHKA_DIMENSIONS larger than the model's vectors names sizes it cannot give.
        if (dimensions !== undefined && dimensions > full[0].length)
          throw new ApiError(
            'validation',
            `output_dimension: model ${id}'s vectors hold ${full[0].length} values; its MATRYOSHKA_DIMENSIONS name more`,
          );
        const floats = full.map((v) => shorten(v, dimensions));
        const meta = { api_version: { version }, billed_units: { input_tokens: result.tokens } };
        // Cohere's v1 answers a list of floats to a request that names no types.
        if (version === '1' && body.embedding_types === undefined) {
          res.json({
            id: requestIdOf(res),
            embeddings: floats,
            texts,
            meta,
            response_type: 'embeddings_floats',
          } satisfies z.infer<typeof floatsResponse>);
          return;
        }
        const types = [...new Set<EmbeddingType>(body.embedding_types ?? ['float'])];
        res.json({
          id: requestIdOf(res),
          embeddings: Object.fromEntries(types.map((type) => [type, floats.map((v) => compactVector(v, type))])),
          texts,
          meta,
          response_type: 'embeddings_by_type',
        } satisfies z.infer<typeof embedResponse>);
      },
    );
    router.use(path, errorHandler(parts.logger, cohereErrors));
  }
}
