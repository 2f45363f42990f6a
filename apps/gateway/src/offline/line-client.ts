import http from 'node:http';
import type { RouteAnswer } from './batch-lines.js';

/**
 * Sends a batch's lines to this gateway's own routes, over loopback HTTP, as a client would: each
 * line goes through the same admission (its key, quota, shedding), the same validation, the same
 * queue in the bulk class, and is answered exactly as the route answers a request alone.
 */
export class LineClient {
  private readonly agent: http.Agent;

  constructor(
    /** This gateway's own HTTP port, and ROOT_PATH ('' where unset), which every route is under. */
    private readonly origin: { host: string; port: number; root: string },
    sockets: number,
  ) {
    this.agent = new http.Agent({ keepAlive: true, maxSockets: sockets });
  }

  /**
   * The route's answer; rejects when the request could not be sent or its answer not read, or
   * `signal` aborts it (the gateway then withdraws it, as for any client that goes away).
   */
  send(
    path: string,
    body: string,
    headers: Record<string, string>,
    signal: AbortSignal,
  ): Promise<RouteAnswer & { retryAfterS?: number }> {
    return new Promise((resolve, reject) => {
      const req = http.request(
        {
          host: this.origin.host,
          port: this.origin.port,
          path: this.origin.root + path,
          method: 'POST',
          agent: this.agent,
          signal,
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('error', reject);
          res.on('end', () => {
            const retryAfter = Number(res.headers['retry-after']);
            resolve({
              status: res.statusCode ?? 0,
              requestId: (res.headers['x-request-id'] as string | undefined) ?? null,
              body: Buffer.concat(chunks),
              json: /^application\/json\b/.test(res.headers['content-type'] ?? ''),
              ...(Number.isFinite(retryAfter) && retryAfter >= 0 ? { retryAfterS: retryAfter } : {}),
            });
          });
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

/** Where this gateway's own HTTP port is reached from inside it. */
export function loopbackHost(host: string): string {
  if (host === '0.0.0.0' || host === '') return '127.0.0.1';
  if (host === '::') return '::1';
  return host;
}
