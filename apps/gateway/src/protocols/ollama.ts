import type { IRouter, Request, Response } from 'express';
import { z } from 'zod';
import { ApiError } from '@tserve/contract';
import { errorHandler, type ErrorFormat } from '../http/http-errors.js';
import { jsonBody } from '../http/request-body.js';
import { jsonList, sendJson } from '../http/json-bytes.js';
import { readLenient } from '../http/ignored-fields.js';
import { answerHeaders, httpEnvelope, inferenceRequest, type ProtocolParts } from '../serving/envelope.js';
import type { InferenceRequest, RequestModel } from '../serving/inference.js';
import { checkKind, EMBEDDING } from '../serving/model-choice.js';
import { ModelNames } from '../serving/model-names.js';
import { shorten } from '../serving/embedding-dimensions.js';
import type { ServedModel } from '../serving/served-models.js';

/**
 * Ollama's embedding API (`POST /api/embed`, the older `POST /api/embeddings`) and the two routes
 * its clients ask first (`GET /api/tags`, `GET /api/version`), so that the `ollama` clients,
 * LangChain's `OllamaEmbeddings`, Open WebUI and the other tools that embed through Ollama work
 * pointed at the gateway. A model is named by its id or an alias (MODEL_ALIASES), with or without
 * Ollama's `:latest` tag. Shapes and statuses follow Ollama's server (server/routes.go).
 */

/** The Ollama release whose API these routes follow; `GET /api/version` says it. */
const OLLAMA_VERSION = '0.32.15';
const NS_PER_MS = 1e6;

const modelName = z
  .string({ error: (issue) => (issue.input === undefined ? 'model is required' : 'model must be a string') })
  .min(1, 'model is required');
/** Accepted as Ollama's clients send them; a model here is always loaded, and runs as its worker was started. */
const keepAlive = z
  .union([z.string(), z.number()])
  .nullable()
  .optional()
  .meta({ description: 'accepted; without effect here: a served model stays loaded' });
const options = z
  .record(z.string(), z.unknown())
  .nullable()
  .optional()
  .meta({ description: "accepted; without effect here: the model runs as its worker's settings say" });

const embedRequest = z
  .object({
    model: modelName,
    input: z
      .union([
        z.string(),
        z.array(z.string({ error: 'invalid input type' }).min(1, 'input must not contain empty strings')),
      ])
      .nullable()
      .optional()
      .meta({ description: 'a text or a list of texts; absent or empty: no vectors (the model is only checked)' }),
    truncate: z
      .boolean()
      .default(true)
      .meta({ description: "cut each input to the model's length; false: a longer input is a 400" }),
    dimensions: z
      .number()
      .int()
      .min(0)
      .optional()
      .meta({ description: 'keep the first values of each vector, normalised again; 0 or the full size: all' }),
    keep_alive: keepAlive,
    options,
  })
  .strict();

const embeddingsRequest = z
  .object({
    model: modelName,
    prompt: z.string().optional().meta({ description: 'one text; empty: no vector (the model is only checked)' }),
    keep_alive: keepAlive,
    options,
  })
  .strict();

const embedResponse = z.strictObject({
  model: z.string().meta({ description: 'the name the request gave' }),
  embeddings: z.array(z.array(z.number())).meta({ description: 'one normalised vector per input, in order' }),
  total_duration: z.number().int().optional().meta({ description: 'nanoseconds the request took here' }),
  load_duration: z
    .number()
    .int()
    .optional()
    .meta({ description: 'nanoseconds it waited for a worker of its model (the queue)' }),
  prompt_eval_count: z.number().int().optional().meta({ description: 'tokens the model read' }),
});
const embeddingsResponse = z.strictObject({
  embedding: z.array(z.number()).meta({ description: "the model's pooled vector, not normalised (as Ollama's)" }),
});
const modelEntry = z.strictObject({
  name: z.string().meta({ description: 'a model id or an alias, with its tag (:latest)' }),
  model: z.string(),
  modified_at: z.string().meta({ description: "when the model's first live worker started" }),
  size: z.number().int(),
  digest: z.string().meta({ description: "the weights' sha256, where the workers agree" }),
  details: z.strictObject({
    parent_model: z.string(),
    format: z.string(),
    family: z.string(),
    families: z.array(z.string()),
    parameter_size: z.string(),
    quantization_level: z.string().meta({ description: 'the dtype its workers run' }),
  }),
  capabilities: z.array(z.string()),
});
const tagsResponse = z.strictObject({ models: z.array(modelEntry) });
const versionResponse = z.strictObject({ version: z.string() });
const errorBody = z.strictObject({ error: z.string() });

/** The shapes of this protocol's bodies, for the OpenAPI document. */
export const ollamaSchemas = {
  embedRequest,
  embedResponse,
  embeddingsRequest,
  embeddingsResponse,
  tagsResponse,
  versionResponse,
  error: errorBody,
};

/** Ollama's error body: `{"error"}`, the status saying the rest. */
const ollamaErrors: ErrorFormat = (error) => ({
  status: error.status,
  body: { error: error.message } satisfies z.infer<typeof errorBody>,
});

/** A served model in Ollama's list, under one of its names. */
function listed(m: ServedModel, name: string): z.infer<typeof modelEntry> {
  const tagged = `${name}:latest`;
  return {
    name: tagged,
    model: tagged,
    modified_at: new Date(Math.min(...m.workers.map((w) => w.startedAt))).toISOString(),
    size: 0,
    digest: m.weights.sha256 ?? '',
    details: {
      parent_model: '',
      format: 'onnx',
      family: '',
      families: [],
      parameter_size: '',
      quantization_level: [...new Set(m.workers.map((w) => w.dtype))].join(','),
    },
    capabilities: ['embedding'],
  };
}

export function ollamaRoutes(router: IRouter, parts: ProtocolParts): void {
  const { config, registry } = parts;
  const names = new ModelNames(config.MODEL_ALIASES);
  const json = jsonBody(config);
  // The model is named in the body: it is checked (and shed) once the body is read.
  const admit = parts.admission.beforeBody(() => undefined);

  /** A request's body parsed against `schema`, with Ollama's words for a missing one. */
  const read = <T extends z.ZodType>(schema: T, req: Request, res: Response): z.output<T> =>
    readLenient(schema, req, res, 'missing request body');

  /** The served embedding model the request names by `name`; Ollama's 404 where none is served by it. */
  const embedder = async (request: InferenceRequest, name: string): Promise<RequestModel> => {
    try {
      return checkKind(await parts.service.modelFor(request), EMBEDDING);
    } catch (err) {
      if (err instanceof ApiError && err.type === 'not_found')
        throw new ApiError('not_found', `model '${name}' not found (${err.message})`);
      throw err;
    }
  };

  router.post('/api/embed', admit, json, async (req, res) => {
    const startedAt = performance.now();
    const body = read(embedRequest, req, res);
    const envelope = httpEnvelope(req, res, config.REQUEST_TIMEOUT_MS);
    const inputs = typeof body.input === 'string' ? (body.input ? [body.input] : []) : (body.input ?? []);
    const request = inferenceRequest(envelope, {
      model: names.resolve(body.model),
      task: 'feature-extraction',
      inputs,
      parameters: { truncation: body.truncate },
    });
    const model = await embedder(request, body.model);
    // Ollama loads the model and answers no vectors.
    if (inputs.length === 0) {
      res.json({ model: body.model, embeddings: [] } satisfies z.infer<typeof embedResponse>);
      return;
    }
    const result = await parts.service.infer(request, model);
    answerHeaders(res, envelope, result);
    // Written around the vectors' JSON, which is the worker's own where nothing here reshaped them.
    const answer = (embeddings: Buffer) => {
      const took = Math.round((performance.now() - startedAt) * NS_PER_MS);
      const waited = Math.round(result.timing.queue_ms * NS_PER_MS);
      const rest = `,"total_duration":${took},"load_duration":${waited},"prompt_eval_count":${result.tokens}}`;
      const head = `{"model":${JSON.stringify(body.model)},"embeddings":`;
      sendJson(res, Buffer.concat([Buffer.from(head), embeddings, Buffer.from(rest)]));
    };
    const vectors = () => result.outputs as number[][];
    // Ollama keeps every value where dimensions is 0 or more than the vector holds.
    const dimensions = body.dimensions && body.dimensions < vectors()[0].length ? body.dimensions : undefined;
    if (result.outputsJson && dimensions === undefined) answer(jsonList(result.outputsJson));
    else answer(Buffer.from(JSON.stringify(vectors().map((v) => shorten(v, dimensions)))));
  });

  router.post('/api/embeddings', admit, json, async (req, res) => {
    const body = read(embeddingsRequest, req, res);
    const envelope = httpEnvelope(req, res, config.REQUEST_TIMEOUT_MS);
    // Ollama's older route gives the model's vector as it comes, not normalised.
    const request = inferenceRequest(envelope, {
      model: names.resolve(body.model),
      task: 'feature-extraction',
      inputs: [body.prompt],
      parameters: { normalize: false },
    });
    const model = await embedder(request, body.model);
    if (!body.prompt) {
      res.json({ embedding: [] } satisfies z.infer<typeof embeddingsResponse>);
      return;
    }
    const result = await parts.service.infer(request, model);
    answerHeaders(res, envelope, result);
    res.json({ embedding: (result.outputs as number[][])[0] } satisfies z.infer<typeof embeddingsResponse>);
  });

  const tags = (_req: Request, res: Response) => {
    const models = registry
      .served()
      .filter(EMBEDDING.fits)
      .flatMap((m) => [m.id, ...names.aliasesOf(m.id)].map((name) => listed(m, name)));
    res.json({ models } satisfies z.infer<typeof tagsResponse>);
  };
  const version = (_req: Request, res: Response) => {
    res.json({ version: OLLAMA_VERSION } satisfies z.infer<typeof versionResponse>);
  };
  router.get('/api/tags', tags);
  router.head('/api/tags', tags);
  router.get('/api/version', version);
  router.head('/api/version', version);
  router.use('/api', (req, _res, next) =>
    next(
      new ApiError(
        'not_found',
        `no route for ${req.method} /api${req.path}; this server offers Ollama's POST /api/embed, POST /api/embeddings, GET /api/tags and GET /api/version`,
      ),
    ),
  );
  router.use('/api', errorHandler(parts.logger, ollamaErrors));
}
