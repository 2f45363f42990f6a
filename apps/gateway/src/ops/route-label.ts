import type { Request, Response } from 'express';

/**
 * A sub-app whose own routes are not worth telling apart (the dashboard, its assets and API) names
 * the label all its requests share.
 */
export function labelRoute(res: Response, label: string): void {
  res.locals.routeLabel = label;
}

/**
 * The route pattern that served a request (`/models/*id`), never the raw URL: a label per model id
 * or per mistyped path would grow without bound. Every route is on the app itself (a sub-app names
 * its label), so the pattern is the whole path. `req.baseUrl` is no part of it: read when the
 * response closes, it is the mount path of whatever middleware answered last, such as a protocol's
 * error handler under `/v1`, which would make `/v1/v1/embeddings` of an error.
 */
export function routeOf(req: Request, res: Response): string {
  const named: unknown = res.locals?.routeLabel;
  if (typeof named === 'string') return named;
  const route = (req as { route?: { path?: unknown } }).route;
  return typeof route?.path === 'string' ? route.path : 'unmatched';
}
