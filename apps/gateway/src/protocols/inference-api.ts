import type { ErrorRequestHandler, IRouter, Request, Response } from 'express';
import { ApiError, describeIssues, inferenceRequestSchema, parseLenient, TASKS, type Task } from '@tserve/contract';
import type { InferenceResult } from '../serving/inference.js';
import { ModelChoice } from '../serving/model-choice.js';
import {
  answerHeaders,
  httpEnvelope,
  inferenceRequest,
  wildcardPath,
  type CallBody,
  type ProtocolParts,
} from '../serving/envelope.js';
import { isJson, jsonBody, readBody, textBody } from '../http/request-body.js';
import { jsonList, sendJson } from '../http/json-bytes.js';
import { noteIgnored } from '../http/ignored-fields.js';

/**
 * The body of an answer: one output for a single input, else the list. The Inference API answers a
 * single text-classification input as a list of one list too (`[[{label, score}, …]]`), which its
 * clients expect.
 */
function respond(res: Response, result: InferenceResult, api: 'inference-api' | 'pipeline'): void {
  const single = result.single && !(api === 'inference-api' && result.task === 'text-classification');
  const json = result.outputsJson;
  if (!json) {
    res.json(single ? result.outputs[0] : result.outputs);
    return;
  }
  // Written as its worker wrote it: parsing it here only to write it again was much of the gateway's
  // work for an embedding, and held the event loop for a large answer.
  sendJson(res, single ? json[0] : jsonList(json));
}

/** What an Inference API body says of its call: `{inputs, parameters, options}`, checked against the contract's schema. */
function parseInferenceBody(body: unknown, res: Response): Omit<CallBody, 'model'> {
  if (body === undefined)
    throw new ApiError('unsupported_media_type', 'send a JSON body with Content-Type: application/json');
  const parsed = parseLenient(inferenceRequestSchema, body);
  if (!parsed.success) throw new ApiError('validation', describeIssues(parsed.error));
  noteIgnored(res, parsed.ignored);
  const { inputs, parameters, options } = parsed.data;
  return {
    inputs,
    parameters: parameters ?? {},
    timeoutMs: options?.timeout_ms,
    priority: options?.priority,
    // `options.wait_for_model` / `x-wait-for-model`: wait while the model loads, or for its first worker.
    waitForModel: options?.wait_for_model,
    // `x-use-cache` / `options.use_cache`: false bypasses the response cache (RESPONSE_CACHE_TTL_S).
    useCache: options?.use_cache,
  };
}

/**
 * `/models/<id>` or, as the Hugging Face router has it, `/models/<id>/pipeline/<task>`, which
 * names the task (an embedding model serves feature-extraction and sentence-similarity). A task
 * that does not exist is refused (404) by admission, once it knows the caller.
 */
function namedInPath(req: Request): { model: string; task?: Task; refusal?: ApiError } {
  const path = wildcardPath(req, 'id');
  const match = /^(.+)\/pipeline\/([^/]+)$/.exec(path);
  if (!match) return { model: path };
  if (!(TASKS as readonly string[]).includes(match[2]))
    return {
      model: match[1],
      refusal: new ApiError('not_found', `unknown task "${match[2]}" in the path; tasks: ${TASKS.join(', ')}`),
    };
  return { model: match[1], task: match[2] as Task };
}

/**
 * The classic pipeline path and the Inference API's. Each route is one handler, in the order of a
 * request's trip: admission's first look (before the body is read), the body read and parsed into
 * the one request, then the inference service (whose first step is admission's second look). `answerErrors` ends each route: these routes
 * come before every protocol's, and an error leaving a route walks each later layer, matching its
 * path, on its way to the app's last handler. Under overload every 503 of shedding made that walk;
 * answered here, a refusal costs the gateway less CPU (bench/HISTORY.md, figures moved from code).
 */
export function inferenceRoutes(router: IRouter, parts: ProtocolParts, answerErrors: ErrorRequestHandler): void {
  const { config, service, admission } = parts;
  const choice = new ModelChoice(parts.registry, config.DEFAULT_MODEL);
  const json = jsonBody(config);
  const rawText = textBody(config);

  // The classic pipeline web server: the whole body is one text; a JSON body may use the Inference API shape.
  // With no default model yet, admission has no model to shed for: the handler says why, after reading the body.
  router.post(
    '/',
    async (req: Request, res: Response) => {
      const admitted = await admission.admit(req, res, choice.defaultModel());
      await readBody(isJson(req) ? json : rawText, req, res);
      const body = isJson(req) ? parseInferenceBody(req.body, res) : { inputs: String(req.body ?? '') };
      if (!isJson(req) && !body.inputs)
        throw new ApiError(
          'validation',
          'send the text to run as the request body, e.g. curl -X POST -d "some text" localhost:8000/',
        );
      const model = choice.requireDefaultModel();
      const envelope = httpEnvelope(req, res, config.REQUEST_TIMEOUT_MS, admitted);
      const result = await service.infer(inferenceRequest(envelope, { ...body, model, api: 'pipeline' }));
      answerHeaders(res, envelope, result);
      respond(res, result, 'pipeline');
    },
    answerErrors,
  );

  // Model ids contain a slash: /models/org/name.
  router.post(
    '/models/*id',
    async (req: Request, res: Response) => {
      const { model, task, refusal } = namedInPath(req);
      const admitted = await admission.admit(req, res, refusal ?? model);
      await readBody(json, req, res);
      if (!isJson(req))
        throw new ApiError('unsupported_media_type', 'send a JSON body with Content-Type: application/json');
      const body = parseInferenceBody(req.body, res);
      const envelope = httpEnvelope(req, res, config.REQUEST_TIMEOUT_MS, admitted);
      const result = await service.infer(inferenceRequest(envelope, { ...body, model, task }));
      answerHeaders(res, envelope, result);
      respond(res, result, 'inference-api');
    },
    answerErrors,
  );
}
