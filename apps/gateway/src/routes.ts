import express, { type Request, type Response, type Router } from 'express';
import { isUtf8 } from 'node:buffer';
import { ApiError, describeIssues, inferenceRequestSchema } from '@tserve/contract';
import type { GatewayConfig } from '@tserve/config';
import type { InferenceResult, InferenceService } from './inference.js';
import { admitBeforeBody, admittedOf, type AdmissionParts } from './admission.js';
import { effectivePriority } from './api-keys.js';

const rejectInvalidUtf8 = (_req: unknown, _res: unknown, buf: Buffer) => {
  if (!isUtf8(buf)) throw Object.assign(new Error('invalid UTF-8'), { type: 'invalid.utf8', status: 400 });
};

function isJson(req: Request): boolean {
  return req.is('application/json') === 'application/json' || Boolean(req.is('+json'));
}

/**
 * The body of an answer: one output for a single input, else the list. The Inference API answers a
 * single text-classification input as a list of one list too (`[[{label, score}, …]]`), which its
 * clients expect.
 */
function respond(res: Response, result: InferenceResult, single: boolean, startedAt: number, api: 'inference-api' | 'pipeline'): void {
  if (api === 'inference-api' && result.task === 'text-classification') single = false;
  res.setHeader('x-queue-time', String(result.timing.queue_ms));
  res.setHeader('x-inference-time', String(result.timing.inference_ms));
  res.setHeader('x-batch-size', String(result.timing.batch_size));
  res.setHeader('x-total-time', (performance.now() - startedAt).toFixed(3));
  if (result.warnings.length) res.setHeader('x-warnings', JSON.stringify(result.warnings));
  res.json(single ? result.outputs[0] : result.outputs);
}

type ParsedBody = ReturnType<typeof parseInferenceBody>;

function parseInferenceBody(body: unknown) {
  if (body === undefined) throw new ApiError('unsupported_media_type', 'send a JSON body with Content-Type: application/json');
  const parsed = inferenceRequestSchema.safeParse(body);
  if (!parsed.success) throw new ApiError('validation', describeIssues(parsed.error));
  const { inputs, parameters, options } = parsed.data;
  return { single: typeof inputs === 'string', inputs: typeof inputs === 'string' ? [inputs] : inputs, parameters: parameters ?? {}, timeoutMs: options?.timeout_ms, priority: options?.priority, options };
}

/** A client may shorten its deadline with this header as well as with `options.timeout_ms`. */
function headerTimeout(req: Request): number | undefined {
  const raw = req.get('x-request-timeout-ms');
  if (raw === undefined) return undefined;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1) throw new ApiError('validation', 'x-request-timeout-ms must be a positive integer');
  return value;
}

/**
 * The request's id, given by the request logger (pino-http) to every request: a fresh UUID, never
 * the client's, since a lone request's id becomes its job id, which must be unique.
 */
const requestId = (req: Request): string => String((req as { id?: unknown }).id);

/** A boolean header of the Hugging Face clients; anything but true/false is refused, never ignored. */
function booleanHeader(req: Request, name: string): boolean | undefined {
  const raw = req.get(name);
  if (raw === undefined) return undefined;
  const value = raw.trim().toLowerCase();
  if (['true', '1'].includes(value)) return true;
  if (['false', '0'].includes(value)) return false;
  throw new ApiError('validation', `${name} must be true or false`);
}

/**
 * `x-wait-for-model` / `options.wait_for_model`: wait while the model loads. `x-use-cache` /
 * `options.use_cache` are accepted and always honoured: this server keeps no cache of answers, so
 * every answer is computed afresh.
 */
function waitForModel(req: Request, body?: { wait_for_model?: boolean }): boolean {
  booleanHeader(req, 'x-use-cache');
  return booleanHeader(req, 'x-wait-for-model') ?? body?.wait_for_model ?? false;
}

/** Aborts when the client closes the connection before its answer was sent. */
function clientGone(res: Response): AbortSignal {
  const controller = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) controller.abort();
  });
  return controller.signal;
}

const minDefined = (...values: Array<number | undefined>) => {
  const defined = values.filter((v): v is number => v !== undefined);
  return defined.length ? Math.min(...defined) : undefined;
};

const modelOf = (req: Request) => ([] as string[]).concat(req.params.id as string | string[]).join('/');

export function inferenceRoutes(config: GatewayConfig, service: InferenceService, admission: AdmissionParts): Router {
  const router = express.Router();
  /** Runs a parsed request with what its headers and admission add, and answers it. */
  const answer = async (req: Request, res: Response, model: string, call: ParsedBody, api: 'inference-api' | 'pipeline') => {
    const startedAt = performance.now();
    const result = await service.infer({
      model,
      inputs: call.inputs,
      parameters: call.parameters,
      timeoutMs: minDefined(call.timeoutMs, headerTimeout(req)),
      priority: effectivePriority(admittedOf(res).priority, call.priority),
      requestId: requestId(req),
      signal: clientGone(res),
      api,
      waitForModel: waitForModel(req, call.options),
    });
    respond(res, result, call.single, startedAt, api);
  };
  // A refused request is answered without reading its body (Express 5 passes the throw on as an error).
  const admit = (model: (req: Request) => string | undefined) => admitBeforeBody(admission, model);
  const json = express.json({ limit: config.MAX_BODY_BYTES, strict: false, verify: rejectInvalidUtf8 });
  const rawText = express.text({ limit: config.MAX_BODY_BYTES, type: () => true, verify: rejectInvalidUtf8 });

  // The classic pipeline web server: the whole body is one text; a JSON body may use the Inference API shape.
  // No default model to shed for yet: the handler says why, after reading the body.
  const defaultModelOrNone = () => {
    try {
      return service.defaultModel();
    } catch {
      return undefined;
    }
  };
  router.post('/', admit(defaultModelOrNone), (req, res, next) => (isJson(req) ? json : rawText)(req, res, next), async (req, res) => {
    const call = isJson(req)
      ? parseInferenceBody(req.body)
      : { single: true, inputs: [String(req.body ?? '')], parameters: {}, timeoutMs: undefined, priority: undefined, options: undefined };
    if (!call.inputs[0]) throw new ApiError('validation', 'send the text to run as the request body, e.g. curl -X POST -d "some text" localhost:8000/');
    await answer(req, res, service.defaultModel(), call, 'pipeline');
  });

  // Model ids contain a slash: /models/org/name.
  router.post('/models/*id', admit((req) => modelOf(req)), json, async (req, res) => {
    if (!isJson(req)) throw new ApiError('unsupported_media_type', 'send a JSON body with Content-Type: application/json');
    const model = modelOf(req);
    const call = parseInferenceBody(req.body);
    await answer(req, res, model, call, 'inference-api');
  });

  return router;
}
