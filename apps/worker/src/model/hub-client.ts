/**
 * What a model's download asks of the hub or its mirror (HF_ENDPOINT): one request at a time, its
 * redirects followed by hand so that the token goes to HF_ENDPOINT's origin only; what the server
 * says of a file before it is fetched; and the server's refusals, in words that name the model.
 */
import { ModelLoadError } from './model.js';

export interface HubSettings {
  /** HF_ENDPOINT, without a trailing slash. */
  endpoint: string;
  revision: string;
  token?: string;
  /** The cache's root: models--<org>--<name>/ folders live in it. */
  cacheDir: string;
  offline: boolean;
}

/** What the server says of a file before it is fetched. */
export interface FileMeta {
  /** Bytes, where the server said. */
  size?: number;
  /** sha256 (LFS files) or git blob sha1 (the others), as the hub's etags are. */
  etag?: string;
  commit?: string;
}

/** The model's config: the first file asked for, so a 404 for it says the model itself is not there. */
export const CONFIG = 'config.json';
/** A connection that delivers nothing for this long is dropped and tried again. */
export const STALL_MS = 30_000;
const USER_AGENT = 'tserve (transformers.js; onnxruntime-node)';

/** The server could not be reached at all (no answer, as opposed to an answer saying no). */
export class Unreachable extends Error {}

export class HubClient {
  private readonly origin: string;

  constructor(
    private readonly model: string,
    readonly hub: HubSettings,
  ) {
    this.origin = new URL(hub.endpoint).origin;
  }

  url(revision: string, file: string): string {
    return `${this.hub.endpoint}/${this.model}/resolve/${encodeURIComponent(revision)}/${file.split('/').map(encodeURIComponent).join('/')}`;
  }

  /**
   * One request, redirects followed by hand: the token goes to HF_ENDPOINT's origin only, never to
   * the storage a redirect points at. `stopAtOtherOrigin` returns a redirect to another origin as
   * it is: the hub's redirect to its storage carries the file's metadata (x-linked-size, -etag).
   */
  async request(
    url: string,
    init: { method: 'HEAD' | 'GET'; from?: number; signal?: AbortSignal },
    stopAtOtherOrigin: boolean,
  ): Promise<Response> {
    let current = new URL(url);
    for (let hop = 0; hop < 10; hop++) {
      // identity: sizes, ranges and etags are the file's own bytes, never a compressed copy's.
      const headers: Record<string, string> = { 'user-agent': USER_AGENT, 'accept-encoding': 'identity' };
      if (this.hub.token && current.origin === this.origin) headers.authorization = `Bearer ${this.hub.token}`;
      if (init.from) headers.range = `bytes=${init.from}-`;
      let res: Response;
      try {
        res = await fetch(current, {
          method: init.method,
          headers,
          redirect: 'manual',
          signal: init.signal ?? AbortSignal.timeout(STALL_MS),
        });
      } catch (err) {
        throw new Unreachable(describeNetworkError(err));
      }
      const location = res.headers.get('location');
      if (res.status < 300 || res.status >= 400 || !location) return res;
      const next = new URL(location, current);
      if (stopAtOtherOrigin && next.origin !== current.origin) return res;
      await res.body?.cancel();
      current = next;
    }
    throw this.failure(`too many redirects from ${url}`);
  }

  /**
   * What the server says of a file. `required`: a missing file fails the load with the server's
   * reason; otherwise it is undefined.
   */
  async head(revision: string, file: string, required: boolean): Promise<FileMeta | undefined> {
    const res = await this.request(this.url(revision, file), { method: 'HEAD' }, true);
    if (
      res.status === 404 &&
      !required &&
      !['RepoNotFound', 'RevisionNotFound'].includes(res.headers.get('x-error-code') ?? '')
    )
      return undefined;
    if (res.status >= 400) throw this.statusFailure(res, file);
    const number = (name: string) => {
      const value = res.headers.get(name);
      return value !== null && /^\d+$/.test(value) ? Number(value) : undefined;
    };
    const redirected = res.status >= 300;
    return {
      size: number('x-linked-size') ?? (redirected ? undefined : number('content-length')),
      etag: normalizeEtag(res.headers.get('x-linked-etag') ?? res.headers.get('etag')),
      commit: res.headers.get('x-repo-commit') ?? undefined,
    };
  }

  /** The server's "no", in words: `failure` has already named the model, the revision and the endpoint. */
  statusFailure(res: Response, file: string): ModelLoadError {
    const code = res.headers.get('x-error-code');
    const said = res.headers.get('x-error-message');
    const detail = said ? ` (${said.slice(0, 300)})` : '';
    if (code === 'RevisionNotFound') return this.failure(`revision "${this.hub.revision}" not found${detail}`);
    if (code === 'EntryNotFound' || (res.status === 404 && code === null && file !== CONFIG))
      return this.failure(`the model has no ${file} at this revision${detail}`);
    if (res.status === 404) return this.failure(`model not found (no ${file})${detail}`);
    if (res.status === 401 || res.status === 403) {
      const why = this.hub.token
        ? `HF_TOKEN was refused (${res.status}): it must belong to an account that can read the model (for a gated model, accept its terms on the hub first)`
        : `the server answered ${res.status}: a gated or private model needs HF_TOKEN`;
      return this.failure(`not readable: ${why}${detail}`);
    }
    return this.failure(`the server answered ${res.status} for ${file}${detail}`);
  }

  failure(reason: string, from = this.hub.endpoint): ModelLoadError {
    return new ModelLoadError(
      `cannot load model "${this.model}" (revision ${this.hub.revision}) from ${from}: ${reason}`,
    );
  }
}

function describeNetworkError(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (err instanceof Error ? err.message : String(err));
}

function normalizeEtag(etag: string | null): string | undefined {
  const value = etag?.replace(/^W\//, '').replace(/^"|"$/g, '').toLowerCase();
  return value || undefined;
}
