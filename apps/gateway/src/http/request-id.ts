import { randomUUID } from 'node:crypto';
import type { RequestHandler, Response } from 'express';

/**
 * Every request gets a fresh UUID, never the client's: a lone request's id becomes its job id,
 * which must be unique, and the worker logs it as `jobId`. Every answer, errors included, names
 * it in `x-request-id`, the id to quote when asking about a request.
 */
export const assignRequestId: RequestHandler = (_req, res, next) => {
  const id = randomUUID();
  res.locals.requestId = id;
  res.setHeader('x-request-id', id);
  next();
};

export function requestIdOf(res: Response): string {
  return res.locals.requestId as string;
}
