/**
 * A worker without MODEL_DIR gets its model's files here, from the hub or a mirror (HF_ENDPOINT),
 * into huggingface_hub's cache layout, and then loads them from that local folder exactly as it
 * loads a MODEL_DIR model.
 *
 * The worker does not let transformers.js fetch for it: transformers.js sends HF_TOKEN to
 * huggingface.co and hf.co only (never to a mirror), keys its cache by the revision's name (a
 * cached `main` is never looked at again, and the commit it was is never known), reports progress
 * without a rate, and has no offline mode that says what is missing.
 *
 * Every file is written under a temporary name beside its final one, checked (its size, and its
 * hash where the server's etag gives one), and renamed only when complete: a download cut off, or
 * a worker killed, leaves a `.incomplete` file that no later start takes for the real one.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import type { WorkerConfig } from '@tserve/config';
import type { ModelDownload } from '@tserve/contract';
import { ModelLoadError, type PlanFiles } from './model.js';

export interface HubSettings {
  /** HF_ENDPOINT, without a trailing slash. */
  endpoint: string;
  revision: string;
  token?: string;
  /** The cache's root: models--<org>--<name>/ folders live in it. */
  cacheDir: string;
  offline: boolean;
}

export interface FetchedModel {
  /** The local folder holding the model's files. */
  dir: string;
  /** The commit the revision resolved to, where the server named one; else the revision asked for. */
  revision: string;
  /** sha256 of each file downloaded by this start, computed as it arrived. */
  sha256: Map<string, string>;
}

/** Files every model served here needs before its weights can be chosen. */
const CONFIG = 'config.json';
const TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json'];
const USER_AGENT = 'tserve (transformers.js; onnxruntime-node)';
/** Tries per file; a cut connection resumes where it stopped when the server honours Range. */
const ATTEMPTS = 5;
/** A connection that delivers nothing for this long is dropped and tried again. */
const STALL_MS = 30_000;
/** How often a download logs its progress. */
const LOG_EVERY_MS = 2_000;
/** How often the heartbeat's view of the download is refreshed. */
const PUBLISH_EVERY_MS = 200;
/** The rate is measured over this window, so that the estimate follows the link as it is now. */
const RATE_WINDOW_MS = 5_000;
/** An .incomplete file untouched this long belongs to a download that died: it is removed. */
const STALE_TEMP_MS = 10 * 60_000;
const COMMIT = /^[0-9a-f]{40}$/;
// The hub's own rule: letters, digits, '.', '_' and '-', an optional namespace, never '--' or '..'.
const REPO_ID = /^(?:[A-Za-z0-9][A-Za-z0-9._-]*\/)?[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** The hub settings of a worker's config, the cache folder resolved as huggingface_hub resolves it. */
export function hubSettings(config: WorkerConfig): HubSettings {
  const home = config.HF_HOME ?? path.join(os.homedir(), '.cache', 'huggingface');
  return {
    endpoint: config.HF_ENDPOINT,
    revision: config.MODEL_REVISION,
    token: config.HF_TOKEN,
    cacheDir: path.resolve(config.HF_HUB_CACHE ?? path.join(home, 'hub')),
    offline: config.HF_HUB_OFFLINE,
  };
}

/** sha256 (hex) of a file, read as a stream. */
export async function sha256File(file: string): Promise<string> {
  const hash = crypto.createHash('sha256');
  for await (const chunk of fs.createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** What the server says of a file before it is fetched. */
interface FileMeta {
  /** Bytes, where the server said. */
  size?: number;
  /** sha256 (LFS files) or git blob sha1 (the others), as the hub's etags are. */
  etag?: string;
  commit?: string;
}

/** A failure worth another try: the connection broke, stalled, or the server had a passing error. */
class Retryable extends Error {}

/**
 * Makes the model's files present in the cache and says where they are. Online, the revision is
 * resolved to its commit first, and only the files the cache lacks for that commit are fetched.
 */
export async function fetchModel(
  model: string,
  hub: HubSettings,
  plan: PlanFiles,
  onProgress: (download: ModelDownload) => void,
  logger: Logger,
): Promise<FetchedModel> {
  if (!REPO_ID.test(model) || model.includes('--') || model.includes('..')) {
    throw new ModelLoadError(
      `cannot load model "${model}" from the hub: not a model id (<org>/<name>: letters, digits, ".", "_" and "-")`,
    );
  }
  return new HubFetch(model, hub, plan, onProgress, logger).run();
}

class HubFetch {
  private readonly repoDir: string;
  private readonly origin: string;

  constructor(
    private readonly model: string,
    private readonly hub: HubSettings,
    private readonly plan: PlanFiles,
    private readonly onProgress: (download: ModelDownload) => void,
    private readonly logger: Logger,
  ) {
    this.repoDir = path.join(hub.cacheDir, `models--${model.split('/').join('--')}`);
    this.origin = new URL(hub.endpoint).origin;
  }

  async run(): Promise<FetchedModel> {
    if (this.hub.offline) return this.fromCache('HF_HUB_OFFLINE=1');
    let resolved: { commit?: string; meta: FileMeta };
    try {
      resolved = await this.resolve();
    } catch (err) {
      if (!(err instanceof Unreachable)) throw err;
      // As huggingface_hub does: a model already in the cache still starts while the hub is down.
      const cached = this.cachedSnapshot();
      if (!cached)
        throw this.failure(
          `cannot reach it (${err.message}), and the revision is not in the cache at ${this.hub.cacheDir}`,
        );
      this.logger.warn(
        { endpoint: this.hub.endpoint, reason: err.message, revision: cached.revision },
        'cannot reach the hub; loading the model from the cache',
      );
      return this.fromCache(`the hub unreachable (${err.message})`);
    }
    const revision = resolved.commit ?? this.hub.revision;
    const dir = path.join(this.repoDir, 'snapshots', revision);
    await fsp.mkdir(dir, { recursive: true });
    if (resolved.commit && resolved.commit !== this.hub.revision) await this.writeRef(resolved.commit);

    const sha256 = new Map<string, string>();
    const progress = new Progress(this.onProgress, this.logger);
    try {
      // The config decides which weights to fetch; it is small, and fetched first.
      if (!fs.existsSync(path.join(dir, CONFIG))) {
        progress.expect(resolved.meta.size ?? 0);
        sha256.set(CONFIG, await this.download(revision, CONFIG, resolved.meta, dir, progress));
      }
      const modelConfig = readConfig(dir);
      const heads = new Map<string, FileMeta | undefined>();
      const head = async (file: string) => {
        if (!heads.has(file)) heads.set(file, await this.head(revision, file, false));
        return heads.get(file) !== undefined;
      };
      const { required, optional } = await this.plan(modelConfig, (file) =>
        fs.existsSync(path.join(dir, file)) ? Promise.resolve(true) : head(file),
      );
      const wanted = [...TOKENIZER_FILES, ...required].filter((file) => !fs.existsSync(path.join(dir, file)));
      const metas = await Promise.all(
        wanted.map(async (file) => (heads.has(file) ? heads.get(file) : this.head(revision, file, true))),
      );
      const extras = await Promise.all(
        optional
          .filter((file) => !fs.existsSync(path.join(dir, file)))
          .map(
            async (file) => [file, heads.has(file) ? heads.get(file) : await this.head(revision, file, false)] as const,
          ),
      );
      const queue: Array<[string, FileMeta]> = [
        ...wanted.map((file, i) => [file, metas[i]!] as [string, FileMeta]),
        ...extras.filter((e): e is [string, FileMeta] => e[1] !== undefined),
      ];
      if (queue.length === 0) {
        if (sha256.size) progress.finish();
        return { dir, revision, sha256 };
      }
      progress.expect(queue.reduce((n, [, meta]) => n + (meta.size ?? 0), 0));
      this.logger.info(
        {
          endpoint: this.hub.endpoint,
          revision,
          files: queue.map(([file]) => file),
          bytes: progress.total,
          cache: this.hub.cacheDir,
        },
        'downloading the model',
      );
      for (const [file, meta] of queue) sha256.set(file, await this.download(revision, file, meta, dir, progress));
      progress.finish();
      return { dir, revision, sha256 };
    } catch (err) {
      throw err instanceof Unreachable ? this.failure(`lost the connection (${err.message})`) : err;
    } finally {
      progress.stop();
    }
  }

  /** The revision's commit, from what the server says of config.json. */
  private async resolve(): Promise<{ commit?: string; meta: FileMeta }> {
    const meta = await this.head(this.hub.revision, CONFIG, true);
    const commit = meta?.commit && COMMIT.test(meta.commit) ? meta.commit : undefined;
    return { commit, meta: meta! };
  }

  /** The snapshot folder the cache holds for the revision: through its ref, or by its own name (a commit). */
  private cachedSnapshot(): { dir: string; revision: string } | undefined {
    let revision = this.hub.revision;
    try {
      const ref = fs.readFileSync(path.join(this.repoDir, 'refs', this.hub.revision), 'utf8').trim();
      if (COMMIT.test(ref)) revision = ref;
    } catch {
      // no ref: the revision may be a commit, or a name a mirror gave no commit for
    }
    const dir = path.join(this.repoDir, 'snapshots', revision);
    return fs.existsSync(dir) ? { dir, revision } : undefined;
  }

  /** Loads from the cache alone; `why` says why the network is not used. */
  private async fromCache(why: string): Promise<FetchedModel> {
    const cached = this.cachedSnapshot();
    const missingHint = `start a worker once online, or fill the cache with \`huggingface-cli download ${this.model} --revision ${this.hub.revision} --cache-dir ${this.hub.cacheDir}\``;
    const from = `the cache at ${this.hub.cacheDir}`;
    if (!cached) throw this.failure(`${why}, and the revision is not in the cache: ${missingHint}`, from);
    const exists = (file: string) => fs.existsSync(path.join(cached.dir, file));
    if (!exists(CONFIG)) throw this.failure(`${why}, and ${cached.dir} lacks ${CONFIG}: ${missingHint}`, from);
    const { required } = await this.plan(readConfig(cached.dir), (file) => Promise.resolve(exists(file)));
    const missing = [...TOKENIZER_FILES, ...required].filter((file) => !exists(file));
    if (missing.length)
      throw this.failure(`${why}, and ${cached.dir} lacks ${missing.join(', ')}: ${missingHint}`, from);
    return { dir: cached.dir, revision: cached.revision, sha256: new Map() };
  }

  private async writeRef(commit: string): Promise<void> {
    const ref = path.join(this.repoDir, 'refs', this.hub.revision);
    await fsp.mkdir(path.dirname(ref), { recursive: true });
    const temp = `${ref}.${process.pid}.incomplete`;
    await fsp.writeFile(temp, commit);
    await fsp.rename(temp, ref);
  }

  private url(revision: string, file: string): string {
    return `${this.hub.endpoint}/${this.model}/resolve/${encodeURIComponent(revision)}/${file.split('/').map(encodeURIComponent).join('/')}`;
  }

  /**
   * One request, redirects followed by hand: the token goes to HF_ENDPOINT's origin only, never to
   * the storage a redirect points at. `stopAtOtherOrigin` returns a redirect to another origin as
   * it is: the hub's redirect to its storage carries the file's metadata (x-linked-size, -etag).
   */
  private async request(
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
  private async head(revision: string, file: string, required: boolean): Promise<FileMeta | undefined> {
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

  /** Fetches one file into `dir`, resuming after a cut; returns its sha256. */
  private async download(
    revision: string,
    file: string,
    meta: FileMeta,
    dir: string,
    progress: Progress,
  ): Promise<string> {
    const dest = path.join(dir, file);
    await fsp.mkdir(path.dirname(dest), { recursive: true });
    await removeStaleTemps(dest);
    const temp = `${dest}.${process.pid}-${crypto.randomBytes(4).toString('hex')}.incomplete`;
    const handle = await fsp.open(temp, 'w');
    let received = 0;
    let check = new Check(meta);
    /** Drops what arrived so far: the next try fetches the file whole. */
    const restart = async () => {
      progress.add(-received);
      received = 0;
      check = new Check(meta);
      await handle.truncate(0);
    };
    progress.startFile(file);
    try {
      for (let attempt = 1; ; attempt++) {
        const stall = new AbortController();
        let timer = setTimeout(() => stall.abort(), STALL_MS);
        try {
          const res = await this.request(
            this.url(revision, file),
            { method: 'GET', from: received, signal: stall.signal },
            false,
          );
          if (res.status === 416 && received > 0) {
            // The range asked for is past what the server holds now: start the file over.
            await res.body?.cancel();
            await restart();
            throw new Retryable('the server refused the range to resume from');
          }
          if (res.status >= 400) {
            await res.body?.cancel();
            if (res.status >= 500 || res.status === 408 || res.status === 429)
              throw new Retryable(`${this.hub.endpoint} answered ${res.status}`);
            throw this.statusFailure(res, file);
          }
          if (received > 0 && res.status !== 206) {
            // The server ignored the Range: start the file over.
            await restart();
          }
          if (!res.body) throw new Retryable('an empty answer');
          for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
            clearTimeout(timer);
            timer = setTimeout(() => stall.abort(), STALL_MS);
            await handle.write(chunk, 0, chunk.length, received);
            check.update(chunk);
            received += chunk.length;
            progress.add(chunk.length);
          }
          if (meta.size !== undefined && received !== meta.size)
            throw new Retryable(`the connection ended after ${received} of ${meta.size} bytes`);
          const mismatch = check.mismatch(received);
          if (mismatch) {
            // Not what the server said it holds: fetch it whole again, within the same tries.
            await restart();
            throw new Retryable(mismatch);
          }
          await handle.datasync();
          await handle.close();
          await fsp.rename(temp, dest);
          return check.sha256;
        } catch (err) {
          const reason = stall.signal.aborted
            ? `no data for ${STALL_MS / 1000} s`
            : err instanceof Error
              ? err.message
              : String(err);
          const retryable =
            err instanceof Retryable || err instanceof Unreachable || stall.signal.aborted || isBodyError(err);
          if (!retryable) throw err;
          if (attempt >= ATTEMPTS)
            throw this.failure(`downloading ${file} failed ${ATTEMPTS} times; the last: ${reason}`);
          const waitMs = Math.min(8_000, 500 * 2 ** (attempt - 1));
          this.logger.warn(
            { file, received, reason, attempt, of: ATTEMPTS, retryInMs: waitMs },
            'download interrupted; resuming',
          );
          await new Promise((resolve) => setTimeout(resolve, waitMs));
        } finally {
          clearTimeout(timer);
        }
      }
    } catch (err) {
      await handle.close().catch(() => {});
      await fsp.rm(temp, { force: true });
      throw err;
    }
  }

  /** The server's "no", in words: `failure` has already named the model, the revision and the endpoint. */
  private statusFailure(res: Response, file: string): ModelLoadError {
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

  private failure(reason: string, from = this.hub.endpoint): ModelLoadError {
    return new ModelLoadError(
      `cannot load model "${this.model}" (revision ${this.hub.revision}) from ${from}: ${reason}`,
    );
  }
}

/** The server could not be reached at all (no answer, as opposed to an answer saying no). */
class Unreachable extends Error {}

function describeNetworkError(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (err instanceof Error ? err.message : String(err));
}

/** undici's errors for a body cut short ("terminated", a socket closed early). */
function isBodyError(err: unknown): boolean {
  return err instanceof TypeError || (err instanceof Error && ['AbortError', 'SocketError'].includes(err.name));
}

function readConfig(dir: string): Record<string, unknown> {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, CONFIG), 'utf8')) as Record<string, unknown>;
  } catch (err) {
    throw new ModelLoadError(
      `the model's ${CONFIG} in ${dir} cannot be read: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
}

function normalizeEtag(etag: string | null): string | undefined {
  const value = etag?.replace(/^W\//, '').replace(/^"|"$/g, '').toLowerCase();
  return value || undefined;
}

/** Removes the .incomplete files of `dest` that no download has touched for a while. */
async function removeStaleTemps(dest: string): Promise<void> {
  const dir = path.dirname(dest);
  const prefix = `${path.basename(dest)}.`;
  for (const name of await fsp.readdir(dir).catch(() => [] as string[])) {
    if (!name.startsWith(prefix) || !name.endsWith('.incomplete')) continue;
    const file = path.join(dir, name);
    const stat = await fsp.stat(file).catch(() => undefined);
    if (stat && Date.now() - stat.mtimeMs > STALE_TEMP_MS) await fsp.rm(file, { force: true });
  }
}

/**
 * The hashes of a file as it arrives: its sha256 (what the worker announces), and the check its
 * etag allows. The hub's etag is the sha256 of an LFS file and the git blob sha1 of the others;
 * some mirrors (Artifactory) give the plain sha1 of the content instead: either is accepted.
 */
class Check {
  private readonly sha = crypto.createHash('sha256');
  private readonly sha1s?: [crypto.Hash, crypto.Hash];
  private digest?: string;

  constructor(private readonly meta: FileMeta) {
    if (meta.etag && /^[0-9a-f]{40}$/.test(meta.etag) && meta.size !== undefined) {
      this.sha1s = [crypto.createHash('sha1').update(`blob ${meta.size}\0`), crypto.createHash('sha1')];
    }
  }

  update(chunk: Uint8Array): void {
    this.sha.update(chunk);
    for (const hash of this.sha1s ?? []) hash.update(chunk);
  }

  /** Why the bytes are not the file the server named, if they are not. */
  mismatch(received: number): string | undefined {
    this.digest = this.sha.digest('hex');
    const etag = this.meta.etag;
    if (etag && /^[0-9a-f]{64}$/.test(etag) && etag !== this.digest)
      return `its sha256 ${this.digest} is not the ${etag} the server named (${received} bytes)`;
    const sha1s = this.sha1s?.map((hash) => hash.digest('hex'));
    if (sha1s && !sha1s.includes(etag!))
      return `its sha1 ${sha1s[1]} (git blob ${sha1s[0]}) is not the ${etag} the server named (${received} bytes)`;
    return undefined;
  }

  get sha256(): string {
    return this.digest ?? this.sha.digest('hex');
  }
}

/** A download's progress: published for the heartbeat often, logged at a steady pace. */
class Progress {
  total = 0;
  private bytes = 0;
  private file = '';
  private readonly started = Date.now();
  private readonly samples: Array<{ at: number; bytes: number }> = [];
  private lastPublished = 0;
  private logTimer?: NodeJS.Timeout;

  constructor(
    private readonly onProgress: (download: ModelDownload) => void,
    private readonly logger: Logger,
  ) {}

  expect(bytes: number): void {
    this.total += bytes;
  }

  startFile(file: string): void {
    this.file = file;
    this.logTimer ??= setInterval(() => this.log(), LOG_EVERY_MS).unref();
    this.publish(true);
  }

  add(bytes: number): void {
    this.bytes += bytes;
    this.publish(false);
  }

  finish(): void {
    this.stop();
    const seconds = (Date.now() - this.started) / 1000;
    this.onProgress({ ...this.state(), percent: 100, doneAt: Date.now() });
    this.logger.info(
      {
        bytes: this.bytes,
        seconds: Math.round(seconds * 10) / 10,
        bytesPerSecond: Math.round(this.bytes / Math.max(seconds, 0.001)),
      },
      'download complete',
    );
  }

  stop(): void {
    clearInterval(this.logTimer);
  }

  private publish(force: boolean): void {
    const now = Date.now();
    if (!force && now - this.lastPublished < PUBLISH_EVERY_MS) return;
    this.lastPublished = now;
    this.samples.push({ at: now, bytes: this.bytes });
    while (this.samples.length > 2 && now - this.samples[0].at > RATE_WINDOW_MS) this.samples.shift();
    this.onProgress(this.state());
  }

  private rate(): number {
    const now = Date.now();
    const first = this.samples[0];
    if (!first || now - first.at < 500) return this.bytes / Math.max((now - this.started) / 1000, 0.001);
    return Math.max(0, (this.bytes - first.bytes) / ((now - first.at) / 1000));
  }

  private state(): ModelDownload {
    const percent = this.total > 0 ? Math.min(100, Math.round((this.bytes / this.total) * 1000) / 10) : 0;
    return {
      file: this.file,
      bytes: this.bytes,
      totalBytes: this.total,
      percent,
      bytesPerSecond: Math.round(this.rate()),
    };
  }

  private log(): void {
    const s = this.state();
    const eta =
      s.bytesPerSecond > 0 && s.totalBytes > 0 ? Math.ceil((s.totalBytes - s.bytes) / s.bytesPerSecond) : undefined;
    this.logger.info(
      {
        file: s.file,
        bytes: s.bytes,
        totalBytes: s.totalBytes,
        percent: s.percent,
        bytesPerSecond: s.bytesPerSecond,
        etaSeconds: eta,
      },
      'downloading',
    );
  }
}
