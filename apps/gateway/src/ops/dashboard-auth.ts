import { createHash, createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Who may open the queue dashboard, decided on header values alone (no Express), so that it is
 * tested without a server: basic auth (DASHBOARD_USER + DASHBOARD_PASSWORD) and/or a token
 * (DASHBOARD_TOKEN), either one enough. The token is sent as `Authorization: Bearer`, or once as
 * `?token=` by a browser, which then gets a session cookie: a keyed hash of the token, so the
 * cookie never holds the token itself.
 */

export interface DashboardCredentials {
  user?: string;
  password?: string;
  token?: string;
}

/** Compares secrets in constant time: hashing first makes lengths equal, so length leaks nothing either. */
function safeEqual(given: string, expected: string): boolean {
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

/** A cookie's value from a `Cookie` header. */
export function readCookie(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

export class DashboardAuth {
  /** The session cookie's value: a keyed hash of the token; undefined without a token. */
  readonly session?: string;
  /** `WWW-Authenticate` challenges, one per way in. */
  readonly challenges: string[];
  /** How to get in, for the 401's message. */
  readonly how: string;

  constructor(
    private readonly credentials: DashboardCredentials,
    /** Where the dashboard is served, named in the 401's message. */
    path: string,
    realm: string,
  ) {
    const { user, password, token } = credentials;
    this.session = token
      ? createHmac('sha256', token).update('tserve dashboard session').digest('base64url')
      : undefined;
    this.challenges = [
      ...(user && password ? [`Basic realm="${realm}", charset="UTF-8"`] : []),
      ...(token ? [`Bearer realm="${realm}"`] : []),
    ];
    this.how = [
      ...(user && password ? ['HTTP basic auth with DASHBOARD_USER and DASHBOARD_PASSWORD'] : []),
      ...(token
        ? [`Authorization: Bearer <DASHBOARD_TOKEN>, or open ${path}?token=<DASHBOARD_TOKEN> once in a browser`]
        : []),
    ].join('; or ');
  }

  /** Whether the `Authorization` header, or the session cookie, lets the caller in. */
  allows(authorization: string, sessionCookie: string | undefined): boolean {
    return this.basicOk(authorization) || this.bearerOk(authorization) || this.cookieOk(sessionCookie);
  }

  /** Whether a `?token=` login names the token. */
  tokenMatches(login: string): boolean {
    return this.credentials.token !== undefined && safeEqual(login, this.credentials.token);
  }

  private basicOk(header: string): boolean {
    const { user, password } = this.credentials;
    if (!user || !password || !header.startsWith('Basic ')) return false;
    const decoded = Buffer.from(header.slice(6).trim(), 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) return false;
    // Both compared, always: stopping at a wrong user name would tell it apart by timing.
    const userOk = safeEqual(decoded.slice(0, colon), user);
    const passwordOk = safeEqual(decoded.slice(colon + 1), password);
    return userOk && passwordOk;
  }

  private bearerOk(header: string): boolean {
    const { token } = this.credentials;
    return Boolean(token) && header.startsWith('Bearer ') && safeEqual(header.slice(7).trim(), token!);
  }

  private cookieOk(cookie: string | undefined): boolean {
    return this.session !== undefined && cookie !== undefined && safeEqual(cookie, this.session);
  }
}

/**
 * A browser sends basic-auth credentials with any request to this host, a forged cross-site form
 * included; the board's state-changing API calls must come from its own pages. Sec-Fetch-Site is
 * trusted first since it survives proxies that rewrite Host; Origin is the fallback for older browsers.
 * Clients that are not browsers (curl) send neither and pass.
 */
export function isForeignWrite(request: {
  method: string;
  secFetchSite?: string;
  origin?: string;
  host?: string;
}): boolean {
  if (request.method === 'GET' || request.method === 'HEAD') return false;
  const { secFetchSite: site, origin, host } = request;
  return site !== undefined
    ? site !== 'same-origin' && site !== 'none'
    : origin !== undefined && hostOf(origin) !== host;
}

function hostOf(origin: string): string | undefined {
  try {
    return new URL(origin).host;
  } catch {
    return undefined;
  }
}
