import type { Request, Response } from 'express';
import { ApiError, type Operation, type Priority } from '@tserve/contract';
import type { GatewayConfig } from '@tserve/config';
import type { Logger } from 'pino';
import type { InferenceCall, InferenceResult, InferenceService } from './inference.js';
import { admittedOf, type Admission } from '../admission/admission.js';
import type { ModelRegistry } from './model-registry.js';
import type { ServedModel } from './served-models.js';
import { requestIdOf } from '../http/request-id.js';
import { noteIgnored } from '../http/ignored-fields.js';
import { effectivePriority } from '../admission/api-keys.js';

/**
 * What every route that runs a model shares, whatever protocol it speaks: the request's id,
 * deadline, priority and client-gone signal, and the timing headers (the bodies: http/request-body.ts).
 */

/** What a protocol's routes use of the gateway (the app's parts). */
export interface ProtocolParts {
  config: GatewayConfig;
  service: InferenceService;
  registry: ModelRegistry;
  admission: Admission;
  logger: Logger;
}

/** A boolean header of the Hugging Face clients; anything but true/false is refused, never ignored. */
function booleanHeader(req: Request, name: string): boolean | undefined {
  return booleanNamed(name, req.get(name));
}

/** A boolean header's or gRPC metadata's value: true/false (or 1/0), else refused. */
export function booleanNamed(name: string, raw: string | undefined): boolean | undefined {
  if (raw === undefined) return undefined;
  const value = raw.trim().toLowerCase();
  if (['true', '1'].includes(value)) return true;
  if (['false', '0'].includes(value)) return false;
  throw new ApiError('validation', `${name} must be true or false`);
}

/** A client may shorten its deadline with this header as well as in the body. */
function headerTimeout(req: Request): number | undefined {
  const raw = req.get('x-request-timeout-ms');
  if (raw === undefined) return undefined;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1)
    throw new ApiError('validation', 'x-request-timeout-ms must be a positive integer');
  return value;
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

/** What a route knows of a call; the rest comes from the HTTP request and its admission. */
export interface RouteCall {
  model: string;
  task?: Operation;
  inputs: unknown;
  parameters?: Record<string, unknown>;
  /** The body's own deadline (ms), if the protocol has one. */
  timeoutMs?: number;
  /** The body's own priority, if the protocol has one; it may lower the key's class, never raise it. */
  priority?: Priority;
  api?: InferenceCall['api'];
  /** The body's own `wait_for_model`, if the protocol has one; the `x-wait-for-model` header decides first. */
  waitForModel?: boolean;
  /** The body's own `use_cache`, if the protocol has one; the `x-use-cache` header decides first. */
  useCache?: boolean;
  /** Tells apart several calls made for one HTTP request (each needs its own request id). */
  part?: string;
}

/** A `*name` wildcard's value as one path: model ids hold slashes (Express has decoded each segment). */
export function wildcardPath(req: Request, name: string): string {
  return ([] as string[]).concat(req.params[name]).join('/');
}

/**
 * What a call brings from its protocol's request besides its body, whatever the protocol: an HTTP
 * request's headers and connection (`httpCaller`), or a gRPC call's metadata and deadline
 * (`admitMetadata`, metadata-call.ts).
 */
interface CallContext {
  requestId: string;
  /** Aborts when the client goes away before its answer. */
  signal: AbortSignal;
  /** The class admission gave the caller. */
  priority: Priority;
  /** The deadline the request's envelope sets (ms): a header, or a gRPC deadline. */
  timeoutMs?: number;
  /** The envelope's `x-wait-for-model`, which decides before the body's own say. */
  waitForModel?: boolean;
  /** The envelope's `x-use-cache`, which decides before the body's own say. */
  useCache?: boolean;
}

/** A protocol's request as the calls it makes see it: it runs them, and waits for their model. */
export interface Caller {
  run: (call: RouteCall) => Promise<InferenceResult>;
  /**
   * The model once a worker serves it, for a call that needs it before it runs (to shape its
   * outputs): a model whose first worker is still to come is waited for, or refused, as a call is.
   */
  whenServed: (model: string, timeoutMs?: number) => Promise<ServedModel>;
}

/** The caller of a request that brought `context`, whatever its protocol. */
export function callerOf(service: InferenceService, context: CallContext): Caller {
  return {
    run: (call) =>
      service.infer({
        model: call.model,
        task: call.task,
        inputs: call.inputs,
        parameters: call.parameters ?? {},
        timeoutMs: minDefined(call.timeoutMs, context.timeoutMs),
        priority: effectivePriority(context.priority, call.priority),
        requestId: call.part ? `${context.requestId}-${call.part}` : context.requestId,
        signal: context.signal,
        api: call.api ?? 'inference-api',
        waitForModel: context.waitForModel ?? call.waitForModel ?? false,
        useCache: context.useCache ?? call.useCache,
      }),
    whenServed: (model, timeoutMs) =>
      service.whenServed(model, {
        waitForModel: context.waitForModel ?? false,
        deadline: service.deadline(minDefined(timeoutMs, context.timeoutMs)),
        signal: context.signal,
      }),
  };
}

/** The caller of an HTTP request: its context from the headers, and the timing headers set on its response. */
export function httpCaller(service: InferenceService, req: Request, res: Response): Caller {
  const context: CallContext = {
    requestId: requestIdOf(res),
    signal: clientGone(res),
    priority: admittedOf(res).priority,
    timeoutMs: headerTimeout(req),
    waitForModel: booleanHeader(req, 'x-wait-for-model'),
    useCache: booleanHeader(req, 'x-use-cache'),
  };
  const caller = callerOf(service, context);
  return { run: (call) => timed(res, () => caller.run(call)), whenServed: caller.whenServed };
}

/** Runs a call for an HTTP request, and sets the timing headers on its response. */
export function runRouteCall(
  service: InferenceService,
  req: Request,
  res: Response,
  call: RouteCall,
): Promise<InferenceResult> {
  return httpCaller(service, req, res).run(call);
}

/** Sets the timing headers of a call's answer on the response. */
async function timed(res: Response, run: () => Promise<InferenceResult>): Promise<InferenceResult> {
  const startedAt = performance.now();
  const result = await run();
  res.setHeader('x-queue-time', String(result.timing.queue_ms));
  res.setHeader('x-inference-time', String(result.timing.inference_ms));
  res.setHeader('x-batch-size', String(result.timing.batch_size));
  res.setHeader('x-total-time', (performance.now() - startedAt).toFixed(3));
  // As the Hugging Face Inference API says it: hit when every input was answered from the response cache.
  if (result.cache) res.setHeader('x-cache', result.cache);
  if (result.warnings.length) res.setHeader('x-warnings', JSON.stringify(result.warnings));
  noteIgnored(res, result.ignored);
  // Which weights answered; left out while the model's workers disagree (a rollout in progress).
  if (result.weights.revision) res.setHeader('x-model-revision', result.weights.revision);
  if (result.weights.sha256) res.setHeader('x-model-sha256', result.weights.sha256);
  return result;
}
