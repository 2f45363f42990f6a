/**
 * A Hugging Face hub mirror on loopback, for tests: serves model folders in the hub's URL layout
 * (`/<org>/<name>/resolve/<revision>/<file>`) with the hub's headers (content-length, etag,
 * x-repo-commit, x-error-code), and sends the weights (.onnx) as the hub sends LFS files: a 302
 * from the hub to a storage server of another origin, with x-linked-size and x-linked-etag.
 * Its storage can be slowed down and made to cut a download off halfway.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import path from 'node:path';

export interface MirrorRepo {
  /** The model's folder (transformers.js layout). */
  dir: string;
  /** Answers 401 without `Authorization: Bearer <token>`, 403 with another token. */
  token?: string;
}

export interface MirrorRequest {
  server: 'hub' | 'storage';
  method: string;
  path: string;
  authorization?: string;
  range?: string;
}

export class HubMirror {
  /** Every revision a repo has: `main` and this commit name the same files. */
  static readonly COMMIT = crypto.createHash('sha1').update('tserve test mirror').digest('hex');
  readonly requests: MirrorRequest[] = [];
  /** Storage's pace, in bytes per second (undefined: as fast as it goes). */
  bytesPerSecond?: number;
  /** Files (e.g. onnx/model_quantized.onnx) whose next download storage cuts off halfway, once each. */
  readonly cutOnce = new Set<string>();
  /** Files whose next download storage sends with one byte changed (the length stays), once each. */
  readonly corruptOnce = new Set<string>();
  private readonly hashes = new Map<string, { sha256: string; gitSha1: string }>();
  private hub?: http.Server;
  private storage?: http.Server;

  constructor(private readonly repos: Record<string, MirrorRepo>) {}

  get url(): string {
    return `http://127.0.0.1:${(this.hub!.address() as AddressInfo).port}`;
  }

  private get storageUrl(): string {
    return `http://127.0.0.1:${(this.storage!.address() as AddressInfo).port}`;
  }

  async start(): Promise<void> {
    this.hub = http.createServer((req, res) => this.answerHub(req, res));
    this.storage = http.createServer((req, res) => void this.answerStorage(req, res));
    for (const server of [this.hub, this.storage]) {
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
    }
  }

  async stop(): Promise<void> {
    for (const server of [this.hub, this.storage]) {
      server?.closeAllConnections();
      server?.close();
    }
  }

  private record(server: MirrorRequest['server'], req: http.IncomingMessage): void {
    this.requests.push({
      server,
      method: req.method ?? '',
      path: req.url ?? '',
      authorization: req.headers.authorization,
      range: req.headers.range,
    });
  }

  /** The file's sha256 (the etag of an LFS file) and git blob sha1 (the etag of the others). */
  private hashesOf(file: string): { sha256: string; gitSha1: string } {
    let known = this.hashes.get(file);
    if (!known) {
      const bytes = fs.readFileSync(file);
      known = {
        sha256: crypto.createHash('sha256').update(bytes).digest('hex'),
        gitSha1: crypto.createHash('sha1').update(`blob ${bytes.length}\0`).update(bytes).digest('hex'),
      };
      this.hashes.set(file, known);
    }
    return known;
  }

  private answerHub(req: http.IncomingMessage, res: http.ServerResponse): void {
    this.record('hub', req);
    const fail = (status: number, code: string, message: string) => {
      res.writeHead(status, { 'x-error-code': code, 'x-error-message': message, 'content-type': 'application/json' });
      res.end(req.method === 'HEAD' ? undefined : JSON.stringify({ error: message }));
    };
    const m = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(req.url ?? '');
    if (!m) return fail(404, 'RepoNotFound', 'Repository not found');
    const [org, name, revision, file] = m.slice(1).map(decodeURIComponent);
    const id = `${org}/${name}`;
    const repo = this.repos[id];
    if (!repo) return fail(401, 'RepoNotFound', 'Repository not found');
    if (repo.token) {
      const auth = req.headers.authorization;
      if (!auth)
        return fail(401, 'GatedRepo', `Access to model ${id} is restricted. You must be authenticated to access it.`);
      if (auth !== `Bearer ${repo.token}`)
        return fail(403, 'GatedRepo', `Access to model ${id} is restricted and you are not in the authorized list.`);
    }
    if (revision !== 'main' && revision !== HubMirror.COMMIT)
      return fail(404, 'RevisionNotFound', `Invalid rev id: ${revision}`);
    const local = path.join(repo.dir, file);
    if (!local.startsWith(repo.dir + path.sep) || !fs.existsSync(local) || !fs.statSync(local).isFile()) {
      return fail(404, 'EntryNotFound', `${file} does not exist on "${revision}"`);
    }
    const size = fs.statSync(local).size;
    const { sha256, gitSha1 } = this.hashesOf(local);
    const common = { 'x-repo-commit': HubMirror.COMMIT, 'accept-ranges': 'bytes' };
    if (file.endsWith('.onnx')) {
      res.writeHead(302, {
        ...common,
        location: `${this.storageUrl}/${id}/${HubMirror.COMMIT}/${file}`,
        'x-linked-size': String(size),
        'x-linked-etag': `"${sha256}"`,
        etag: `"${sha256}"`,
        'content-length': '0',
      });
      res.end();
      return;
    }
    res.writeHead(200, {
      ...common,
      'content-length': String(size),
      etag: `"${gitSha1}"`,
      'content-type': 'application/octet-stream',
    });
    res.end(req.method === 'HEAD' ? undefined : fs.readFileSync(local));
  }

  private async answerStorage(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    this.record('storage', req);
    const m = /^\/([^/]+\/[^/]+)\/[0-9a-f]{40}\/(.+)$/.exec(req.url ?? '');
    const repo = m && this.repos[m[1]];
    if (!m || !repo) {
      res.writeHead(404).end();
      return;
    }
    const file = m[2];
    let bytes = fs.readFileSync(path.join(repo.dir, file));
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    const from = range ? Number(range[1]) : 0;
    const headers = {
      'content-type': 'application/octet-stream',
      'accept-ranges': 'bytes',
      etag: `"${this.hashesOf(path.join(repo.dir, file)).sha256}"`,
    };
    if (range) {
      res.writeHead(206, {
        ...headers,
        'content-length': String(bytes.length - from),
        'content-range': `bytes ${from}-${bytes.length - 1}/${bytes.length}`,
      });
    } else {
      res.writeHead(200, { ...headers, 'content-length': String(bytes.length) });
    }
    if (req.method === 'HEAD') {
      res.end();
      return;
    }
    const cutAt = this.cutOnce.delete(file) ? Math.floor(bytes.length / 2) : undefined;
    if (this.corruptOnce.delete(file)) {
      bytes = Buffer.from(bytes);
      bytes[bytes.length >> 1] ^= 0xff;
    }
    const chunk = 64 * 1024;
    for (let at = from; at < bytes.length; at += chunk) {
      if (res.destroyed) return;
      if (cutAt !== undefined && at >= cutAt) {
        // The connection breaks mid-body, as a proxy or a flaky link would break it.
        res.socket?.destroy();
        return;
      }
      const part = bytes.subarray(at, Math.min(at + chunk, bytes.length));
      if (!res.write(part)) await once(res, 'drain');
      if (this.bytesPerSecond) await new Promise((r) => setTimeout(r, (part.length / this.bytesPerSecond!) * 1000));
    }
    res.end();
  }
}
