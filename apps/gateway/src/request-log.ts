import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Request, RequestHandler, Response } from 'express';
import type { Level, Logger } from 'pino';
import { pinoHttp } from 'pino-http';
import { routeOf } from './metrics.js';
import { DASHBOARD_PATH } from './dashboard.js';
import type { Admitted } from './admission.js';

/** Polled by probes, scrapers and the dashboard's own page: at info they would drown the requests that matter. */
const QUIET_ROUTES = new Set(['/health', '/ready', '/metrics', DASHBOARD_PATH]);

const asExpress = (req: IncomingMessage, res: ServerResponse) => ({ req: req as Request, res: res as Response });

function level(req: Request, res: Response): Level {
  if (res.statusCode === 401 || res.statusCode === 403) return 'warn'; // refused dashboard logins are worth seeing
  if (QUIET_ROUTES.has(routeOf(req, res))) return 'debug';
  if (res.statusCode === 500) return 'error';
  // 503 and 504 are load shedding and deadlines: expected under load, and counted in the metrics.
  if (res.statusCode >= 500) return 'warn';
  return 'info';
}

/**
 * One JSON line per request, written when its response closes. Only what is safe to keep: no
 * bodies (they are the users' texts), no headers (they hold credentials), no query string (it may
 * hold the dashboard token). The request id is a fresh UUID, never the client's: it becomes the
 * job id, which must be unique, and the worker logs it as `jobId`.
 */
export function requestLog(logger: Logger): RequestHandler {
  const line = (rawReq: IncomingMessage, rawRes: ServerResponse) => {
    const { req, res } = asExpress(rawReq, rawRes);
    const startedAt = res.locals.startedAt as number;
    const admitted = res.locals.admitted as Admitted | undefined;
    return {
      method: req.method,
      route: routeOf(req, res),
      path: req.originalUrl.split('?')[0],
      status: res.statusCode,
      duration_ms: Number((performance.now() - startedAt).toFixed(3)),
      ...(res.writableFinished ? {} : { aborted: true }),
      // The key's name, never the key: logs are read by more people than hold keys.
      ...(admitted?.key ? { key: admitted.key.name } : {}),
    };
  };
  const http = pinoHttp({
    logger,
    genReqId: () => randomUUID(),
    // The line is built by `line` alone; the default serializers would copy every header.
    wrapSerializers: false,
    serializers: { req: (req: IncomingMessage) => ({ method: req.method }), res: (res: ServerResponse) => ({ status: res.statusCode }) },
    quietReqLogger: true,
    quietResLogger: true,
    customLogLevel: (req, res) => level(req as Request, res as Response),
    customSuccessObject: (req, res) => line(req, res),
    customErrorObject: (req, res) => line(req, res),
    customSuccessMessage: (req, res) => (res.writableFinished ? 'request completed' : 'request aborted by the client'),
    customErrorMessage: () => 'request failed',
  });
  return (req, res, next) => {
    res.locals.startedAt = performance.now();
    http(req, res);
    // Every answer, errors included, names the id to quote when asking about it.
    res.setHeader('x-request-id', req.id as string);
    next();
  };
}
