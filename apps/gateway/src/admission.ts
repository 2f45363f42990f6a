import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { ApiError, PRIORITIES, type Priority } from '@tserve/contract';
import { effectivePriority, keyAllows, type ApiKey, type KeyStore } from './api-keys.js';
import { QuotaExceeded, type QuotaReason, type QuotaState, type Quotas } from './quotas.js';
import type { InferenceService } from './inference.js';

/** What admission decided for a request; the route handler reads it from `res.locals.admitted`. */
export interface Admitted {
  key?: ApiKey;
  priority: Priority;
}

export interface AdmissionParts {
  /** Absent when API keys are off (the default): every caller is admitted as interactive. */
  keys?: KeyStore;
  quotas?: Quotas;
  service: InferenceService;
  /** The longest a request may live: slots in flight expire after it. */
  requestTimeoutMs: number;
  onQuotaRejected?: (key: ApiKey, reason: QuotaReason) => void;
}

export function admittedOf(res: Response): Admitted {
  return (res.locals.admitted as Admitted | undefined) ?? { priority: 'interactive' };
}

/** The caller's key as sent: `Authorization: Bearer <key>` (what the HF clients send) or `x-api-key`. */
function presentedKey(req: Request): string | undefined {
  const auth = req.get('authorization');
  if (auth) return /^Bearer\s+(\S+)$/i.exec(auth)?.[1] ?? '';
  return req.get('x-api-key');
}

function askedPriority(req: Request): Priority | undefined {
  const raw = req.get('x-priority');
  if (raw === undefined) return undefined;
  if (!(PRIORITIES as readonly string[]).includes(raw)) throw new ApiError('validation', `x-priority must be one of ${PRIORITIES.join(', ')}`);
  return raw as Priority;
}

function setQuotaHeaders(res: Response, state: QuotaState): void {
  res.setHeader('RateLimit-Policy', state.policy);
  res.setHeader('RateLimit-Limit', String(state.limit));
  res.setHeader('RateLimit-Remaining', String(state.remaining));
  res.setHeader('RateLimit-Reset', String(state.resetSeconds));
}

/**
 * "May this request enter?", decided before its body is read, in order of cost: who is calling
 * (401), may they call this model (403), is the model overloaded (503, batch class first), is the
 * caller over its quota (429). A refused request costs no body parsing and enqueues nothing.
 */
export function admitBeforeBody(parts: AdmissionParts, modelOf: (req: Request) => string | undefined): RequestHandler {
  return async (req: Request, res: Response, next: NextFunction) => {
    let key: ApiKey | undefined;
    if (parts.keys) {
      key = parts.keys.verify(presentedKey(req));
      if (!key) {
        res.setHeader('WWW-Authenticate', 'Bearer realm="tserve"');
        throw new ApiError('unauthorized', 'a valid API key is required: send Authorization: Bearer <key> or x-api-key: <key>');
      }
    }
    const model = modelOf(req);
    if (key && model !== undefined && !keyAllows(key, model)) {
      throw new ApiError('forbidden', `API key ${key.name} may not call model ${model}`);
    }
    const priority = effectivePriority(key?.priority ?? 'interactive', askedPriority(req));
    if (model !== undefined) parts.service.shedEarly(model, priority);
    if (key && parts.quotas) {
      try {
        const { state, release } = await parts.quotas.admit(key, String((req as { id?: unknown }).id), Date.now() + parts.requestTimeoutMs);
        res.once('close', release);
        if (state) setQuotaHeaders(res, state);
      } catch (err) {
        if (!(err instanceof QuotaExceeded)) throw new ApiError('unavailable', 'cannot check the API key\'s quota (Redis is not answering); retry shortly', 2);
        parts.onQuotaRejected?.(key, err.reason);
        if (err.state) setQuotaHeaders(res, err.state);
        throw err;
      }
    }
    res.locals.admitted = { key, priority } satisfies Admitted;
    next();
  };
}
