import type { ErrorRequestHandler, IRouter, NextFunction, Request, Response } from 'express';
import { ApiError, describeIssues, inferenceRequestSchema, parseLenient, TASKS, type Task } from '@tserve/contract';
import type { InferenceResult } from '../serving/inference.js';
import { ModelChoice } from '../serving/model-choice.js';
import { runRouteCall, wildcardPath, type ProtocolParts } from '../serving/route-call.js';
import { isJson, jsonBody, textBody } from '../http/request-body.js';
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

type ParsedBody = ReturnType<typeof parseInferenceBody>;

function parseInferenceBody(body: unknown, res: Response) {
  if (body === undefined)
    throw new ApiError('unsupported_media_type', 'send a JSON body with Content-Type: application/json');
  const parsed = parseLenient(inferenceRequestSchema, body);
  if (!parsed.success) throw new ApiError('validation', describeIssues(parsed.error));
  noteIgnored(res, parsed.ignored);
  const { inputs, parameters, options } = parsed.data;
  return { inputs, parameters: parameters ?? {}, timeoutMs: options?.timeout_ms, priority: options?.priority, options };
}

/**
 * `/models/<id>` or, as the Hugging Face router has it, `/models/<id>/pipeline/<task>`, which
 * names the task (an embedding model serves feature-extraction and sentence-similarity).
 */
function modelAndTask(req: Request): { model: string; task?: Task } {
  const path = wildcardPath(req, 'id');
  const match = /^(.+)\/pipeline\/([^/]+)$/.exec(path);
  if (!match) return { model: path };
  if (!(TASKS as readonly string[]).includes(match[2]))
    throw new ApiError('not_found', `unknown task "${match[2]}" in the path; tasks: ${TASKS.join(', ')}`);
  return { model: match[1], task: match[2] as Task };
}

/**
 * The classic pipeline path and the Inference API's. `answerErrors` ends each route: these routes
 * come before every protocol's, and an error leaving a route walks each later layer, matching its
 * path, on its way to the app's last handler. Under overload every 503 of shedding made that walk;
 * answered here, a refusal costs the gateway less CPU (bench/HISTORY.md, figures moved from code).
 */
export function inferenceRoutes(router: IRouter, parts: ProtocolParts, answerErrors: ErrorRequestHandler): void {
  const { config, service, admission } = parts;
  const choice = new ModelChoice(parts.registry, config.DEFAULT_MODEL);
  /** Runs a parsed request with what its headers and admission add, and answers it. */
  const answer = async (
    req: Request,
    res: Response,
    model: string,
    call: ParsedBody,
    api: 'inference-api' | 'pipeline',
    task?: Task,
  ) => {
    const result = await runRouteCall(service, req, res, {
      model,
      task,
      inputs: call.inputs,
      parameters: call.parameters,
      timeoutMs: call.timeoutMs,
      priority: call.priority,
      api,
      // `options.wait_for_model` / `x-wait-for-model`: wait while the model loads, or for its first worker.
      waitForModel: call.options?.wait_for_model,
      // `x-use-cache` / `options.use_cache`: false bypasses the response cache (RESPONSE_CACHE_TTL_S).
      useCache: call.options?.use_cache,
    });
    respond(res, result, api);
  };
  // A refused request is answered without reading its body (Express 5 passes the throw on as an error).
  const admit = (model: (req: Request) => string | undefined) => admission.beforeBody(model);
  const json = jsonBody(config);
  const rawText = textBody(config);

  // The classic pipeline web server: the whole body is one text; a JSON body may use the Inference API shape.
  // With no default model yet, admission has no model to shed for: the handler says why, after reading the body.
  router.post(
    '/',
    admit(() => choice.defaultModel()),
    (req: Request, res: Response, next: NextFunction) => (isJson(req) ? json : rawText)(req, res, next),
    async (req: Request, res: Response) => {
      const call = isJson(req)
        ? parseInferenceBody(req.body, res)
        : {
            inputs: String(req.body ?? ''),
            parameters: {},
            timeoutMs: undefined,
            priority: undefined,
            options: undefined,
          };
      if (!isJson(req) && !call.inputs)
        throw new ApiError(
          'validation',
          'send the text to run as the request body, e.g. curl -X POST -d "some text" localhost:8000/',
        );
      await answer(req, res, choice.requireDefaultModel(), call, 'pipeline');
    },
    answerErrors,
  );

  // Model ids contain a slash: /models/org/name.
  router.post(
    '/models/*id',
    admit((req) => modelAndTask(req).model),
    json,
    async (req: Request, res: Response) => {
      if (!isJson(req))
        throw new ApiError('unsupported_media_type', 'send a JSON body with Content-Type: application/json');
      const { model, task } = modelAndTask(req);
      const call = parseInferenceBody(req.body, res);
      await answer(req, res, model, call, 'inference-api', task);
    },
    answerErrors,
  );
}
