import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import express, { type Express, type Request, type RequestHandler, type Response } from 'express';
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';
import { ApiError } from '@tserve/contract';
import { ConfigError, type GatewayConfig } from '@tserve/config';
import type { ModelRegistry } from './model-registry.js';
import type { QueueSet } from './queues.js';
import { labelRoute } from './metrics.js';

export const DASHBOARD_PATH = '/admin/queues';
const SESSION_COOKIE = 'tserve_dashboard';
const REALM = 'tserve queue dashboard';

export interface DashboardParts {
  config: GatewayConfig;
  registry: ModelRegistry;
  queues: QueueSet;
}

/** Compares secrets in constant time: hashing first makes lengths equal, so length leaks nothing either. */
function safeEqual(given: string, expected: string): boolean {
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

function readCookie(req: Request, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** 401 and 403 are the dashboard's alone, so their error types are not among the inference API's ones. */
function unauthorized(res: Response, challenges: string[], message: string): void {
  res.setHeader('WWW-Authenticate', challenges);
  res.setHeader('cache-control', 'no-store');
  res.status(401).json({ error: message, error_type: 'unauthorized' });
}

/**
 * Basic auth (DASHBOARD_USER + DASHBOARD_PASSWORD) and/or a token (DASHBOARD_TOKEN), either one
 * enough. The token is sent as `Authorization: Bearer`, or once as `?token=` by a browser, which
 * then gets a session cookie: a keyed hash of the token, so the cookie never holds the token itself.
 */
function authenticate(config: GatewayConfig): RequestHandler {
  const user = config.DASHBOARD_USER;
  const password = config.DASHBOARD_PASSWORD;
  const token = config.DASHBOARD_TOKEN;
  const session = token ? createHmac('sha256', token).update('tserve dashboard session').digest('base64url') : undefined;
  const challenges = [
    ...(user && password ? [`Basic realm="${REALM}", charset="UTF-8"`] : []),
    ...(token ? [`Bearer realm="${REALM}"`] : []),
  ];
  const how = [
    ...(user && password ? ['HTTP basic auth with DASHBOARD_USER and DASHBOARD_PASSWORD'] : []),
    ...(token ? [`Authorization: Bearer <DASHBOARD_TOKEN>, or open ${DASHBOARD_PATH}?token=<DASHBOARD_TOKEN> once in a browser`] : []),
  ].join('; or ');

  const basicOk = (header: string) => {
    if (!user || !password || !header.startsWith('Basic ')) return false;
    const decoded = Buffer.from(header.slice(6).trim(), 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) return false;
    // Both compared, always: stopping at a wrong user name would tell it apart by timing.
    const userOk = safeEqual(decoded.slice(0, colon), user);
    const passwordOk = safeEqual(decoded.slice(colon + 1), password);
    return userOk && passwordOk;
  };
  const bearerOk = (header: string) => Boolean(token) && header.startsWith('Bearer ') && safeEqual(header.slice(7).trim(), token!);
  const cookieOk = (req: Request) => {
    const cookie = readCookie(req, SESSION_COOKIE);
    return session !== undefined && cookie !== undefined && safeEqual(cookie, session);
  };

  return (req, res, next) => {
    const header = req.get('authorization') ?? '';
    if (basicOk(header) || bearerOk(header) || cookieOk(req)) return next();

    const login = typeof req.query.token === 'string' ? req.query.token : undefined;
    if (token && login !== undefined && req.method === 'GET') {
      if (!safeEqual(login, token)) return unauthorized(res, challenges, 'wrong dashboard token');
      res.cookie(SESSION_COOKIE, session!, { httpOnly: true, sameSite: 'strict', secure: req.secure, path: DASHBOARD_PATH });
      // Drops the token from the address bar and the browser history.
      const url = new URL(req.originalUrl, 'http://x');
      url.searchParams.delete('token');
      return res.redirect(303, `${url.pathname}${url.search}`);
    }
    unauthorized(res, challenges, header || login !== undefined ? 'wrong dashboard credentials' : `the queue dashboard needs credentials: ${how}`);
  };
}

/**
 * A browser sends basic-auth credentials with any request to this host, a forged cross-site form
 * included; the board's state-changing API calls must come from its own pages. Sec-Fetch-Site is
 * trusted first since it survives proxies that rewrite Host; Origin is the fallback for older browsers.
 * Clients that are not browsers (curl) send neither and pass.
 */
const sameOriginWrites: RequestHandler = (req, res, next) => {
  if (req.method === 'GET' || req.method === 'HEAD') return next();
  const site = req.get('sec-fetch-site');
  const origin = req.get('origin');
  const foreign = site !== undefined ? site !== 'same-origin' && site !== 'none' : origin !== undefined && safeHost(origin) !== req.get('host');
  if (!foreign) return next();
  res.status(403).json({ error: 'dashboard changes are accepted from the dashboard\'s own pages only', error_type: 'forbidden' });
};

function safeHost(origin: string): string | undefined {
  try {
    return new URL(origin).host;
  } catch {
    return undefined;
  }
}

/**
 * The bull-board queue dashboard at /admin/queues, one queue per model the workers announce;
 * models that lost their workers stay listed, since that is when their queue is worth a look.
 * Off unless credentials are configured: it can retry, remove and add jobs (unless
 * DASHBOARD_READONLY), and shows request inputs.
 */
export function dashboard(parts: DashboardParts): Express {
  const { config, registry, queues } = parts;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use((_req, res, next) => {
    labelRoute(res, DASHBOARD_PATH);
    next();
  });

  const basic = Boolean(config.DASHBOARD_USER || config.DASHBOARD_PASSWORD);
  if (basic && !(config.DASHBOARD_USER && config.DASHBOARD_PASSWORD)) {
    throw new ConfigError('invalid configuration:\n  DASHBOARD_USER, DASHBOARD_PASSWORD: set both for basic auth on the queue dashboard, or neither');
  }
  if (!basic && !config.DASHBOARD_TOKEN) {
    app.use((_req, _res, next) =>
      next(new ApiError('not_found', `the queue dashboard is off; set DASHBOARD_USER and DASHBOARD_PASSWORD (basic auth) or DASHBOARD_TOKEN (bearer token) to serve it at ${DASHBOARD_PATH}`)),
    );
    return app;
  }

  const serverAdapter = new ExpressAdapter().setBasePath(DASHBOARD_PATH);
  const board = createBullBoard({ queues: [], serverAdapter, options: { uiConfig: { boardTitle: 'tserve queues' } } });
  const shown = new Set<string>();
  // The registry learns models from worker heartbeats; the board catches up on its next request
  // (its page polls), so a new model's queue appears without a restart and without a timer.
  const showNewModels: RequestHandler = (_req, _res, next) => {
    for (const id of [...registry.served().map((m) => m.id), ...registry.lost()]) {
      if (shown.has(id)) continue;
      board.addQueue(new BullMQAdapter(queues.get(id), { readOnlyMode: config.DASHBOARD_READONLY, allowRetries: !config.DASHBOARD_READONLY, description: id }));
      shown.add(id);
    }
    next();
  };

  const boardApp = serverAdapter.getRouter() as Express;
  boardApp.disable('x-powered-by');
  app.use(authenticate(config), sameOriginWrites, showNewModels, boardApp);
  return app;
}
