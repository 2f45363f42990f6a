/**
 * One file of a model, fetched into the cache whole or not at all: written under a temporary name
 * beside its final one, resumed after a cut where the server honours Range, checked (its size, and
 * its hash where the server's etag gives one), and renamed only when complete. A download cut off,
 * or a worker killed, leaves a `.incomplete` file that no later start takes for the real one.
 */
import crypto from 'node:crypto';
import fsp, { type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { DownloadProgress } from './download-progress.js';
import { STALL_MS, Unreachable, type FileMeta, type HubClient } from './hub-client.js';

/** Tries per file; a cut connection resumes where it stopped when the server honours Range. */
const ATTEMPTS = 5;
/** An .incomplete file untouched this long belongs to a download that died: it is removed. */
const STALE_TEMP_MS = 10 * 60_000;

/** A failure worth another try: the connection broke, stalled, or the server had a passing error. */
class Retryable extends Error {}

export interface WantedFile {
  revision: string;
  file: string;
  meta: FileMeta;
  /** The snapshot folder it goes into. */
  dir: string;
}

/** Fetches one file into its folder, resuming after a cut; returns its sha256. */
export async function downloadFile(
  client: HubClient,
  { revision, file, meta, dir }: WantedFile,
  progress: DownloadProgress,
  logger: Logger,
): Promise<string> {
  const dest = path.join(dir, file);
  await fsp.mkdir(path.dirname(dest), { recursive: true });
  await removeStaleTemps(dest);
  const temp = `${dest}.${process.pid}-${crypto.randomBytes(4).toString('hex')}.incomplete`;
  const handle = await fsp.open(temp, 'w');
  const arrival = new Arrival(handle, meta, progress);
  progress.startFile(file);
  try {
    for (let attempt = 1; ; attempt++) {
      const stall = new Stall();
      try {
        const res = await client.request(
          client.url(revision, file),
          { method: 'GET', from: arrival.received, signal: stall.signal },
          false,
        );
        await receive(client, res, file, arrival, stall);
        await handle.datasync();
        await handle.close();
        await fsp.rename(temp, dest);
        return arrival.sha256;
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
          throw client.failure(`downloading ${file} failed ${ATTEMPTS} times; the last: ${reason}`);
        const waitMs = Math.min(8_000, 500 * 2 ** (attempt - 1));
        logger.warn(
          { file, received: arrival.received, reason, attempt, of: ATTEMPTS, retryInMs: waitMs },
          'download interrupted; resuming',
        );
        await new Promise((resolve) => setTimeout(resolve, waitMs));
      } finally {
        stall.clear();
      }
    }
  } catch (err) {
    await handle.close().catch(() => {});
    await fsp.rm(temp, { force: true });
    throw err;
  }
}

/**
 * Writes one answer's bytes into the file, after those that arrived before it where the server
 * resumed; throws Retryable where another try may do better.
 */
async function receive(client: HubClient, res: Response, file: string, arrival: Arrival, stall: Stall): Promise<void> {
  if (res.status === 416 && arrival.received > 0) {
    // The range asked for is past what the server holds now: start the file over.
    await res.body?.cancel();
    await arrival.restart();
    throw new Retryable('the server refused the range to resume from');
  }
  if (res.status >= 400) {
    await res.body?.cancel();
    if (res.status >= 500 || res.status === 408 || res.status === 429)
      throw new Retryable(`${client.hub.endpoint} answered ${res.status}`);
    throw client.statusFailure(res, file);
  }
  if (arrival.received > 0 && res.status !== 206) {
    // The server ignored the Range: start the file over.
    await arrival.restart();
  }
  if (!res.body) throw new Retryable('an empty answer');
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    stall.rearm();
    await arrival.write(chunk);
  }
  const { size } = arrival.meta;
  if (size !== undefined && arrival.received !== size)
    throw new Retryable(`the connection ended after ${arrival.received} of ${size} bytes`);
  const mismatch = arrival.mismatch();
  if (mismatch) {
    // Not what the server said it holds: fetch it whole again, within the same tries.
    await arrival.restart();
    throw new Retryable(mismatch);
  }
}

/** The file's bytes as they arrive in its temporary file: counted, hashed, and told to the progress. */
class Arrival {
  received = 0;
  private check: Check;

  constructor(
    private readonly handle: FileHandle,
    readonly meta: FileMeta,
    private readonly progress: DownloadProgress,
  ) {
    this.check = new Check(meta);
  }

  async write(chunk: Uint8Array): Promise<void> {
    await this.handle.write(chunk, 0, chunk.length, this.received);
    this.check.update(chunk);
    this.received += chunk.length;
    this.progress.add(chunk.length);
  }

  /** Drops what arrived so far: the next try fetches the file whole. */
  async restart(): Promise<void> {
    this.progress.add(-this.received);
    this.received = 0;
    this.check = new Check(this.meta);
    await this.handle.truncate(0);
  }

  mismatch(): string | undefined {
    return this.check.mismatch(this.received);
  }

  get sha256(): string {
    return this.check.sha256;
  }
}

/** Aborts a request whose connection delivers nothing for STALL_MS: armed as it starts, again at each chunk. */
class Stall {
  private readonly controller = new AbortController();
  readonly signal = this.controller.signal;
  private timer = this.arm();

  rearm(): void {
    clearTimeout(this.timer);
    this.timer = this.arm();
  }

  clear(): void {
    clearTimeout(this.timer);
  }

  private arm(): NodeJS.Timeout {
    return setTimeout(() => this.controller.abort(), STALL_MS);
  }
}

/** undici's errors for a body cut short ("terminated", a socket closed early). */
function isBodyError(err: unknown): boolean {
  return err instanceof TypeError || (err instanceof Error && ['AbortError', 'SocketError'].includes(err.name));
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
