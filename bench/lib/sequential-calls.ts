import http from 'node:http';
import { summarize, type Summary } from './stats.ts';

/**
 * One client calling one URL at a time: `POST` with a text body over a kept-alive connection,
 * timed call by call after a warm-up. node:http, not fetch: fetch spends about a millisecond of
 * its own per call on these machines, which would be counted as the server's.
 */
export async function timeSequentialCalls(url: string, body: string, calls: number, warmup = 30): Promise<Summary> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const post = () =>
    new Promise<void>((resolve, reject) => {
      const req = http.request(
        url,
        { method: 'POST', agent, headers: { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(body) } },
        (res) => {
          res.resume();
          res.on('end', () =>
            res.statusCode! < 400 ? resolve() : reject(new Error(`POST ${url} answered ${res.statusCode}`)),
          );
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  try {
    for (let i = 0; i < warmup; i++) await post();
    const times: number[] = [];
    for (let i = 0; i < calls; i++) {
      const started = performance.now();
      await post();
      times.push(performance.now() - started);
    }
    return summarize(times);
  } finally {
    agent.destroy();
  }
}
