import express, { type Express, type RequestHandler, type Response } from 'express';
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';
import { ApiError } from '@tserve/contract';
import { ConfigError, type GatewayConfig } from '@tserve/config';
import type { Transport } from '../transport/index.js';
import type { Snapshot } from '../serving/snapshot.js';
import { labelRoute } from './route-label.js';
import { sendError } from '../http/http-errors.js';
import { DashboardAuth, isForeignWrite, readCookie } from './dashboard-auth.js';

export const DASHBOARD_PATH = '/admin/queues';
const SESSION_COOKIE = 'tserve_dashboard';
/** Where a browser finds the dashboard: DASHBOARD_PATH, under ROOT_PATH where set. */
const dashboardBase = (config: Pick<GatewayConfig, 'ROOT_PATH'>) => `${config.ROOT_PATH ?? ''}${DASHBOARD_PATH}`;
const REALM = 'tserve queue dashboard';

export interface DashboardParts {
  config: GatewayConfig;
  snapshot: Snapshot;
  /** Each model's BullMQ queue, shown as it is. */
  transport: Pick<Transport, 'queue'>;
}

function unauthorized(res: Response, challenges: string[], message: string): void {
  res.setHeader('WWW-Authenticate', challenges);
  res.setHeader('cache-control', 'no-store');
  sendError(res, new ApiError('unauthorized', message));
}

/** Lets in a caller with credentials (see `DashboardAuth`); a browser's `?token=` login gets the session cookie. */
function authenticate(config: GatewayConfig): RequestHandler {
  const auth = new DashboardAuth(
    { user: config.DASHBOARD_USER, password: config.DASHBOARD_PASSWORD, token: config.DASHBOARD_TOKEN },
    dashboardBase(config),
    REALM,
  );
  return (req, res, next) => {
    const header = req.get('authorization') ?? '';
    if (auth.allows(header, readCookie(req.headers.cookie, SESSION_COOKIE))) return next();

    const login = typeof req.query.token === 'string' ? req.query.token : undefined;
    if (auth.session !== undefined && login !== undefined && req.method === 'GET') {
      if (!auth.tokenMatches(login)) return unauthorized(res, auth.challenges, 'wrong dashboard token');
      res.cookie(SESSION_COOKIE, auth.session, {
        httpOnly: true,
        sameSite: 'strict',
        secure: req.secure,
        path: dashboardBase(config),
      });
      // Drops the token from the address bar and the browser history.
      const url = new URL(req.originalUrl, 'http://x');
      url.searchParams.delete('token');
      return res.redirect(303, `${url.pathname}${url.search}`);
    }
    unauthorized(
      res,
      auth.challenges,
      header || login !== undefined
        ? 'wrong dashboard credentials'
        : `the queue dashboard needs credentials: ${auth.how}`,
    );
  };
}

/** Refuses state-changing calls from other sites (see `isForeignWrite`). */
const sameOriginWrites: RequestHandler = (req, res, next) => {
  if (
    !isForeignWrite({
      method: req.method,
      secFetchSite: req.get('sec-fetch-site'),
      origin: req.get('origin'),
      host: req.get('host'),
    })
  )
    return next();
  sendError(res, new ApiError('forbidden', "dashboard changes are accepted from the dashboard's own pages only"));
};

/** A `<link>` to another origin; bull-board's page has one, to a public font CDN. */
const FOREIGN_LINK = /<link\b[^>]*\bhref="(?:[a-z][a-z0-9+.-]*:)?\/\/[^"]*"[^>]*>\s*/gi;

/**
 * Serves bull-board's page without its links to other origins: a private network cannot reach its
 * font CDN (the page falls back to system fonts), and the CDN would learn who opens the dashboard.
 * bull-board has no option for this: its uiConfig sets the title, logo, favicon and menu, not the <head>.
 */
const ownOriginOnly: RequestHandler = (req, res, next) => {
  const render = res.render.bind(res);
  res.render = (view: string, options?: object) =>
    render(view, options ?? {}, (err: Error | null, html: string) =>
      err ? req.next?.(err) : res.send(html.replace(FOREIGN_LINK, '')),
    );
  next();
};

/**
 * The bull-board queue dashboard at /admin/queues, one queue per model the workers announce;
 * models that lost their workers stay listed, since that is when their queue is worth a look.
 * Off unless credentials are configured: it can retry, remove and add jobs (unless
 * DASHBOARD_READONLY), and shows request inputs.
 */
export function dashboard(parts: DashboardParts): Express {
  const { config, snapshot, transport } = parts;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use((_req, res, next) => {
    labelRoute(res, DASHBOARD_PATH);
    next();
  });

  const basic = Boolean(config.DASHBOARD_USER || config.DASHBOARD_PASSWORD);
  if (basic && !(config.DASHBOARD_USER && config.DASHBOARD_PASSWORD)) {
    throw new ConfigError(
      'invalid configuration:\n  DASHBOARD_USER, DASHBOARD_PASSWORD: set both for basic auth on the queue dashboard, or neither',
    );
  }
  if (!basic && !config.DASHBOARD_TOKEN) {
    app.use((_req, _res, next) =>
      next(
        new ApiError(
          'not_found',
          `the queue dashboard is off; set DASHBOARD_USER and DASHBOARD_PASSWORD (basic auth) or DASHBOARD_TOKEN (bearer token) to serve it at ${DASHBOARD_PATH}`,
        ),
      ),
    );
    return app;
  }

  // The page's own links, and its API's, are absolute: under ROOT_PATH where it is set.
  const serverAdapter = new ExpressAdapter().setBasePath(dashboardBase(config));
  const board = createBullBoard({ queues: [], serverAdapter, options: { uiConfig: { boardTitle: 'tserve queues' } } });
  const shown = new Set<string>();
  // The registry learns models from worker heartbeats; the board catches up on its next request
  // (its page polls), so a new model's queue appears without a restart and without a timer.
  const showNewModels: RequestHandler = (_req, _res, next) => {
    // Every model that has been served has a queue, whether it is served now or not.
    for (const { id } of snapshot().models.filter((m) => m.task !== undefined)) {
      if (shown.has(id)) continue;
      board.addQueue(
        new BullMQAdapter(transport.queue(id), {
          readOnlyMode: config.DASHBOARD_READONLY,
          allowRetries: !config.DASHBOARD_READONLY,
          description: id,
        }),
      );
      shown.add(id);
    }
    next();
  };

  const boardApp = serverAdapter.getRouter() as Express;
  boardApp.disable('x-powered-by');
  app.use(authenticate(config), sameOriginWrites, showNewModels, ownOriginOnly, boardApp);
  return app;
}
