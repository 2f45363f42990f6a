import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { ApiError, PRIORITIES, type Priority } from '@tserve/contract';
import { effectivePriority, keyAllows, type ApiKey, type KeyStore } from './api-keys.js';
import { QuotaExceeded, type QuotaReason, type QuotaState, type Quotas } from './quotas.js';
import type { RedisBreaker } from './breaker.js';
import type { LineCallers } from './line-callers.js';
import type { BodyBudget, Overload } from './overload.js';
import { describeRedisFailure } from '@tserve/queue';
import { requestIdOf } from '../http/request-id.js';
import type { CountsBodyBytes } from '../http/http-server.js';

/**
 * "May this request enter?": the one place that decides it. Who is calling and what they may call
 * (API keys, quotas: `api-keys.ts`, `quotas.ts`), and whether the server can take it (overload:
 * `overload.ts` for the depth and size limits, `breaker.ts` for Redis). Asked twice: before the
 * body is read, with what the headers and path say, and after, with what the body says.
 */

/** What admission decided for a request: `admit` returns it, and keeps it in `res.locals.admitted` (`admittedOf`). */
export interface Admitted {
  key?: ApiKey;
  priority: Priority;
}

export interface AdmissionParts {
  /** Absent when API keys are off (the default): every caller is admitted as interactive. */
  keys?: KeyStore;
  /** A batch's lines, sent by this gateway as the key that owns the batch (with keys). */
  lines?: LineCallers;
  quotas?: Quotas;
  /** The queue depth limits, and the size limit, a model's requests are held to. */
  overload: Overload;
  /** The request bodies this gateway may hold at once. */
  bodies: { budget: BodyBudget };
  breaker: RedisBreaker;
  /** The longest a request may live: slots in flight expire after it. */
  requestTimeoutMs: number;
  onQuotaRejected?: (key: ApiKey, reason: QuotaReason) => void;
}

/** What a request says of its caller, however its protocol carries it. */
export interface CallerAsks {
  /** The API key as presented; '' when presented in a form not understood. */
  key?: string;
  /**
   * The model, where the request names it before its body; or why the name is refused (a path that
   * names an unknown task), thrown once the key is known: a caller without a key hears 401 first.
   */
  model?: string | ApiError;
  /** The priority class asked for (`x-priority`), unchecked; it may lower the key's class, never raise it. */
  priority?: string;
}

/** What a request without a valid key is told to send. */
const UNKNOWN_KEY = 'Bearer realm="tserve"';

export function admittedOf(res: Response): Admitted {
  return (res.locals.admitted as Admitted | undefined) ?? { priority: 'interactive' };
}

/** The caller's key as sent: `Authorization: Bearer <key>` (what the HF clients send) or `x-api-key`. */
function presentedKey(req: Request): string | undefined {
  return keyPresented(req.get('authorization'), req.get('x-api-key'));
}

/** The key in an `authorization` and an `x-api-key` value (headers, or gRPC metadata). */
export function keyPresented(authorization: string | undefined, apiKey: string | undefined): string | undefined {
  if (authorization) return /^Bearer\s+(\S+)$/i.exec(authorization)?.[1] ?? '';
  return apiKey;
}

function priorityNamed(raw: string | undefined): Priority | undefined {
  if (raw === undefined) return undefined;
  if (!(PRIORITIES as readonly string[]).includes(raw))
    throw new ApiError('validation', `x-priority must be one of ${PRIORITIES.join(', ')}`);
  return raw as Priority;
}

function setQuotaHeaders(res: Response, state: QuotaState): void {
  res.setHeader('RateLimit-Policy', state.policy);
  res.setHeader('RateLimit-Limit', String(state.limit));
  res.setHeader('RateLimit-Remaining', String(state.remaining));
  res.setHeader('RateLimit-Reset', String(state.resetSeconds));
}

export class Admission {
  constructor(private readonly parts: AdmissionParts) {}

  /**
   * Decided before the body is read, in order of cost: who is calling (401), may they call this
   * model (403), is the model overloaded (503, bulk class first), does the gateway have room for
   * the body (503), is the caller over its quota (429). A refused request costs no body parsing and
   * enqueues nothing: under overload, parsing a body only to shed it is the work the server can
   * least afford. `modelOf` names the model if the path or headers do; undefined if only the body
   * will tell.
   */
  beforeBody(modelOf: (req: Request) => string | undefined): RequestHandler {
    return async (req: Request, res: Response, next: NextFunction) => {
      await this.admit(req, res, modelOf(req));
      next();
    };
  }

  /**
   * The first look at an HTTP request, before its body is read (as `beforeBody`, for a route that
   * reads its body itself): what it decided (also kept for the request log: `admittedOf`), or the
   * refusal thrown. `model` names the model where the path or headers do (CallerAsks).
   */
  async admit(req: Request, res: Response, model: CallerAsks['model']): Promise<Admitted> {
    const asks = { key: presentedKey(req), model, priority: req.get('x-priority') };
    const admitted = this.caller(asks, () => res.setHeader('WWW-Authenticate', UNKNOWN_KEY));
    this.holdBody(req, res);
    const quota = await this.quota(admitted, requestIdOf(res), (state) => setQuotaHeaders(res, state));
    if (quota) res.once('close', quota);
    res.locals.admitted = admitted satisfies Admitted;
    return admitted;
  }

  /**
   * Who is calling, and nothing more (401 without a valid key), for routes that keep a caller's
   * things and run no model as they answer (a batch's files and batches): `admittedOf(res).key`.
   */
  identify(): RequestHandler {
    return (req: Request, res: Response, next: NextFunction) => {
      const asks = { key: presentedKey(req) };
      res.locals.admitted = this.caller(asks, () => res.setHeader('WWW-Authenticate', UNKNOWN_KEY)) satisfies Admitted;
      next();
    };
  }

  /**
   * The part of the first look that any protocol's request gets, from what it says of itself: who
   * is calling (401; `onUnknownKey` is told first), may they call `model` (403), and is its queue
   * full for their priority class (503). Throws the refusal.
   */
  caller(asked: CallerAsks, onUnknownKey?: () => void): Admitted {
    const { keys } = this.parts;
    let key: ApiKey | undefined;
    if (keys) {
      key = keys.verify(asked.key) ?? this.parts.lines?.keyOf(asked.key);
      if (!key) {
        onUnknownKey?.();
        throw new ApiError(
          'unauthorized',
          'a valid API key is required: send Authorization: Bearer <key> or x-api-key: <key>',
        );
      }
    }
    const model = asked.model;
    if (model instanceof ApiError) throw model;
    if (key && model !== undefined && !keyAllows(key, model))
      throw new ApiError('forbidden', `API key ${key.name} may not call model ${model}`);
    const priority = effectivePriority(key?.priority ?? 'interactive', priorityNamed(asked.priority));
    const overloaded = model === undefined ? undefined : this.parts.overload.beforeBody(model, priority);
    if (overloaded) throw overloaded;
    return { key, priority };
  }

  /**
   * The caller's quota (429 when over it): a slot for `requestId`, and its release, to call once
   * the request is answered; undefined where there is no quota to keep. `onState` is told the
   * quota's state, on admission and on refusal alike.
   */
  async quota(
    { key }: Admitted,
    requestId: string,
    onState: (state: QuotaState) => void,
  ): Promise<(() => void) | undefined> {
    const { quotas, requestTimeoutMs, onQuotaRejected } = this.parts;
    if (!key || !quotas) return undefined;
    try {
      const { state, release } = await quotas.admit(key, requestId, Date.now() + requestTimeoutMs);
      if (state) onState(state);
      return release;
    } catch (err) {
      if (!(err instanceof QuotaExceeded))
        throw new ApiError(
          'unavailable',
          "cannot check the API key's quota (Redis is not answering); retry shortly",
          2,
        );
      onQuotaRejected?.(key, err.reason);
      if (err.state) onState(err.state);
      throw err;
    }
  }

  /**
   * Decided once the body is read and validated: is the request too large (413), is the model's
   * queue full (503; again, since it may have filled while the body arrived), is Redis known to
   * be down (503, the breaker is open). A request sent as `pieces` needs room for each, as that
   * many requests would. Throws the refusal.
   */
  afterBody(model: string, priority: Priority, size: { inputs: number; sequences: number; pieces?: number }): void {
    const refusal = this.parts.overload.afterBody(model, priority, size) ?? this.parts.breaker.refusal();
    if (refusal) throw refusal;
  }

  /** An admitted request is on its way to the queue: it counts towards the model's depth until `leave` is called. */
  enter(model: string): () => void {
    return this.parts.overload.depth.enter(model);
  }

  /**
   * Why an enqueue failed, as the client is told: the breaker if it is open now, else what the
   * breaker last heard of Redis (a call refused while it probes says nothing itself), else what
   * the failure says of Redis.
   */
  enqueueFailure(err: unknown): ApiError {
    const { breaker } = this.parts;
    return (
      breaker.refusal() ??
      new ApiError(
        'unavailable',
        `the queue is unavailable: ${breaker.cause() ?? describeRedisFailure(err)}; retry shortly`,
        2,
      )
    );
  }

  /**
   * Counts the body's bytes against the gateway's budget as they are received, until the answer: a
   * request that declared a body and sends it slowly, or never, holds only what it sent. A body
   * that no longer fits is refused with 503 (the rest of it is dropped as it arrives).
   */
  private holdBody(req: Request, res: Response): void {
    const { budget } = this.parts.bodies;
    if (budget.full) throw budget.refusal();
    const hold = budget.hold();
    (req as CountsBodyBytes).bodyBytes = (bytes) => (hold.add(bytes) ? undefined : budget.refusal());
    res.once('close', hold.release);
  }
}
