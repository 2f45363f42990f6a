import type { Request, RequestHandler, Response } from 'express';
import type { Level, Logger } from 'pino';
import { routeOf } from './route-label.js';
import { DASHBOARD_PATH } from './dashboard.js';
import { requestIdOf } from '../http/request-id.js';
import { admittedOf } from '../admission/admission.js';
import { answeredError } from '../http/http-errors.js';
import { ignoredOf } from '../http/ignored-fields.js';

/** Polled by probes, scrapers and the dashboard's own page: at info they would drown the requests that matter. */
const QUIET_ROUTES = new Set(['/health', '/ready', '/metrics', DASHBOARD_PATH]);

function level(req: Request, res: Response): Level {
  if (res.statusCode === 401 || res.statusCode === 403) return 'warn'; // refused dashboard logins are worth seeing
  if (QUIET_ROUTES.has(routeOf(req, res))) return 'debug';
  if (res.statusCode === 500) return 'error';
  // 503 and 504 are load shedding and deadlines: expected under load, and counted in the metrics.
  if (res.statusCode >= 500) return 'warn';
  return 'info';
}

function message(res: Response): string {
  if (res.statusCode >= 500) return 'request failed';
  return res.writableFinished ? 'request completed' : 'request aborted by the client';
}

/**
 * One JSON line per request, written when its response closes (answered or abandoned, as the
 * metrics count it). Only what is safe to keep: no bodies (they are the users' texts), no headers
 * (they hold credentials), no query string (it may hold the dashboard token). Comes after
 * `assignRequestId`, whose id it logs as `reqId`.
 */
export function requestLog(logger: Logger): RequestHandler {
  return (req, res, next) => {
    const startedAt = performance.now();
    res.once('close', () => {
      const key = admittedOf(res).key;
      const error = answeredError(res);
      const ignored = ignoredOf(res);
      logger[level(req, res)](
        {
          reqId: requestIdOf(res),
          method: req.method,
          route: routeOf(req, res),
          path: req.originalUrl.split('?')[0],
          status: res.statusCode,
          duration_ms: Number((performance.now() - startedAt).toFixed(3)),
          ...(res.writableFinished ? {} : { aborted: true }),
          // The server's own words for a 5xx; a 4xx's message may quote the client's input.
          ...(error ? { error_type: error.type, ...(error.status >= 500 ? { error: error.message } : {}) } : {}),
          // The key's name, never the key: logs are read by more people than hold keys.
          ...(key ? { key: key.name } : {}),
          // Fields the body held that no schema here knows, left out: a misspelt option shows here.
          ...(ignored.length ? { ignored_fields: ignored.slice(0, 20) } : {}),
        },
        message(res),
      );
    });
    next();
  };
}
