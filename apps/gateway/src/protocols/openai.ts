import type { IRouter, Request, Response } from 'express';
import { z } from 'zod';
import { ApiError, describeIssues, parseLenient, type ErrorType } from '@tserve/contract';
import type { ServedModel } from '../serving/served-models.js';
import { errorHandler, type ErrorFormat } from '../http/http-errors.js';
import {
  answerHeaders,
  httpEnvelope,
  inferenceRequest,
  wildcardPath,
  type ProtocolParts,
} from '../serving/envelope.js';
import { jsonBody } from '../http/request-body.js';
import { sendJson } from '../http/json-bytes.js';
import { shorten } from '../serving/embedding-dimensions.js';
import { compactVector } from '../serving/compact-vectors.js';
import { noteIgnored } from '../http/ignored-fields.js';
import { TokenTexts } from './openai-tokens.js';

/**
 * OpenAI's embeddings API (`POST /v1/embeddings`, `GET /v1/models`), so that the `openai` clients,
 * LangChain and LlamaIndex work pointed at `http://host:8000/v1`; and the same routes without
 * `/v1` (`POST /embeddings`, `GET /models`), as TEI and Infinity serve them, for clients given the
 * server's bare address. Embeddings come from the same feature-extraction workers as
 * `/models/<id>`: pooled as the model's folder says, and normalised.
 */

const text = z.string({ error: 'each input must be a string' }).min(1, 'input must not contain empty strings');
const tokenIds = z
  .array(
    z
      .number({ error: 'token ids must be whole numbers' })
      .int('token ids must be whole numbers')
      .min(0, 'token ids must not be negative'),
  )
  .min(1, 'input must not contain empty token lists');
const embeddingsRequest = z
  .object({
    model: z
      .string({ error: (issue) => (issue.input === undefined ? 'model is required' : 'model must be a string') })
      .min(1),
    input: z.union(
      [
        text,
        z.array(text).min(1, 'input must not be an empty list'),
        tokenIds.meta({ description: "one text as tiktoken's token ids (OPENAI_TOKEN_ENCODING)" }),
        z.array(tokenIds).min(1, 'input must not be an empty list'),
      ],
      {
        error: (issue) => {
          if (issue.input === undefined) return 'input is required';
          if (Array.isArray(issue.input) && issue.input.length === 0) return 'input must not be an empty list';
          return 'input must be a string, a list of strings, or token ids (a list, or a list of lists)';
        },
      },
    ),
    encoding_format: z.enum(['float', 'base64', 'int8', 'uint8', 'binary', 'ubinary']).optional().meta({
      description:
        "OpenAI's float or base64 (little-endian float32); not OpenAI's: int8, uint8, binary, ubinary, Cohere's compact types (docs/api/openai.md)",
    }),
    dimensions: z.number().int().min(1).optional(),
    user: z.string().optional(),
    prompt_name: z
      .string()
      .min(1)
      .optional()
      .meta({ description: "not OpenAI's: one of the model's named prompts, put before each input" }),
  })
  .strict();

type OpenAiTypes = Partial<Record<ErrorType, { type: string; code: string | null }>>;

const OPENAI_TYPES: OpenAiTypes = {
  unauthorized: { type: 'invalid_request_error', code: 'invalid_api_key' },
  forbidden: { type: 'permission_error', code: 'model_not_allowed' },
  not_found: { type: 'invalid_request_error', code: 'model_not_found' },
  rate_limited: { type: 'rate_limit_error', code: 'rate_limit_exceeded' },
  overloaded: { type: 'server_error', code: 'overloaded' },
  unavailable: { type: 'server_error', code: 'unavailable' },
  timeout: { type: 'server_error', code: 'timeout' },
  internal: { type: 'server_error', code: null },
};

const errorBody = z.strictObject({
  error: z.strictObject({ message: z.string(), type: z.string(), param: z.null(), code: z.string().nullable() }),
});

/**
 * OpenAI's error body, `{"error": {"message", "type", "param", "code"}}`: the embeddings routes'
 * types and codes, with `overrides` for routes whose errors OpenAI names otherwise (its files).
 */
export function openAiErrors(overrides: OpenAiTypes = {}): ErrorFormat {
  const types = { ...OPENAI_TYPES, ...overrides };
  return (error) => {
    const { type, code } = types[error.type] ?? { type: 'invalid_request_error', code: null };
    return {
      status: error.status,
      body: { error: { message: error.message, type, param: null, code } } satisfies z.infer<typeof errorBody>,
    };
  };
}

const modelSchema = z.strictObject({
  id: z.string(),
  object: z.literal('model'),
  created: z.number().int(),
  owned_by: z.string(),
});
const embeddingsResponse = z.strictObject({
  object: z.literal('list'),
  data: z.array(
    z.strictObject({
      object: z.literal('embedding'),
      index: z.number().int(),
      embedding: z.union([
        z.array(z.number()).meta({ description: 'floats, or the integers of a compact encoding_format' }),
        z.string().meta({ description: 'little-endian float32, base64 (encoding_format "base64")' }),
      ]),
    }),
  ),
  model: z.string(),
  usage: z.strictObject({ prompt_tokens: z.number().int(), total_tokens: z.number().int() }),
});
const modelList = z.strictObject({ object: z.literal('list'), data: z.array(modelSchema) });

/** The shapes of this protocol's bodies, for the OpenAPI document. */
export const openAiSchemas = { embeddingsRequest, embeddingsResponse, model: modelSchema, modelList, error: errorBody };

/**
 * The answer of float embeddings, written around each one's JSON as its worker wrote it: the bytes
 * `res.json` writes for the same answer, without parsing each number here to write it again.
 */
export function floatAnswer(embeddings: Buffer[], model: string, tokens: number): Buffer {
  const parts: Buffer[] = [Buffer.from('{"object":"list","data":[')];
  embeddings.forEach((embedding, index) =>
    parts.push(Buffer.from(`${index ? ',' : ''}{"object":"embedding","index":${index},"embedding":`), embedding, CLOSE),
  );
  const usage = `{"prompt_tokens":${tokens},"total_tokens":${tokens}}`;
  parts.push(Buffer.from(`],"model":${JSON.stringify(model)},"usage":${usage}}`));
  return Buffer.concat(parts);
}

const CLOSE = Buffer.from('}');

/** A served model as OpenAI's model object; created when its first live worker started. */
function modelObject(m: ServedModel): z.infer<typeof modelSchema> {
  return {
    id: m.id,
    object: 'model',
    created: Math.floor(Math.min(...m.workers.map((w) => w.startedAt)) / 1000),
    owned_by: 'tserve',
  };
}

const isList = <T>(list: unknown[], is: (x: unknown) => x is T): list is T[] => list.every(is);

/** The texts of an embeddings request: its strings, or the texts its token ids encode. */
async function textsOf(
  input: z.output<typeof embeddingsRequest>['input'],
  tokens: TokenTexts,
): Promise<string | string[]> {
  if (typeof input === 'string') return input;
  if (isList(input, (x) => typeof x === 'string')) return input;
  if (isList(input, (x) => typeof x === 'number')) return (await tokens.texts([input]))[0];
  return tokens.texts(input);
}

export function openAiRoutes(router: IRouter, { config, service, registry, admission, logger }: ProtocolParts): void {
  const tokens = new TokenTexts(config.OPENAI_TOKEN_ENCODING);
  const errors = errorHandler(logger, openAiErrors());
  // The model is named in the body: it is checked (and shed) once the body is read.
  const embeddings = [
    admission.beforeBody(() => undefined),
    jsonBody(config),
    async (req: Request, res: Response) => {
      const parsed = parseLenient(embeddingsRequest, req.body);
      if (!parsed.success) throw new ApiError('validation', describeIssues(parsed.error));
      noteIgnored(res, parsed.ignored);
      const { model, input, encoding_format: format = 'float', dimensions, prompt_name } = parsed.data;
      const envelope = httpEnvelope(req, res, config.REQUEST_TIMEOUT_MS);
      const request = inferenceRequest(envelope, {
        model,
        task: 'feature-extraction',
        inputs: await textsOf(input, tokens),
        ...(prompt_name !== undefined ? { parameters: { prompt_name } } : {}),
      });
      const chosen = await service.modelFor(request);
      const { tasks } = chosen.served;
      if (!tasks.includes('feature-extraction')) {
        throw new ApiError(
          'validation',
          `model ${model} is not an embedding model (it serves ${tasks.join(', ')}); see GET /v1/models`,
        );
      }
      const result = await service.infer(request, chosen);
      answerHeaders(res, envelope, result);
      if (result.outputsJson && format === 'float' && dimensions === undefined) {
        sendJson(res, floatAnswer(result.outputsJson, model, result.tokens));
        return;
      }
      const vectors = (result.single ? [result.outputs[0]] : result.outputs) as number[][];
      if (dimensions !== undefined && dimensions > vectors[0].length) {
        throw new ApiError('validation', `dimensions must be at most ${vectors[0].length} for model ${model}`);
      }
      res.json({
        object: 'list',
        data: vectors.map((vector, index) => {
          // base64 is OpenAI's own: little-endian float32 bytes.
          return { object: 'embedding', index, embedding: compactVector(shorten(vector, dimensions), format) };
        }),
        model,
        usage: { prompt_tokens: result.tokens, total_tokens: result.tokens },
      } satisfies z.infer<typeof embeddingsResponse>);
    },
  ];
  const models = (_req: Request, res: Response) => {
    res.json({ object: 'list', data: registry.served().map(modelObject) } satisfies z.infer<typeof modelList>);
  };
  const model = (req: Request, res: Response) => {
    const id = wildcardPath(req, 'id');
    const m = registry.get(id);
    if (!m) throw new ApiError('not_found', `model ${id} is not served; see GET /v1/models`);
    res.json(modelObject(m));
  };

  router.post('/v1/embeddings', ...embeddings);
  router.get('/v1/models', models);
  router.get('/v1/models/*id', model);
  // Without /v1, as TEI and Infinity serve them; `POST /models/<id>` stays the Inference API's.
  router.post('/embeddings', ...embeddings, errors);
  router.get('/models', models, errors);
  router.get('/models/*id', model, errors);

  router.use('/v1', (req, _res, next) =>
    next(
      new ApiError(
        'not_found',
        `no route for ${req.method} /v1${req.path}; this server offers POST /v1/embeddings, GET /v1/models and POST /v1/rerank`,
      ),
    ),
  );
  router.use('/v1', errors);
}
