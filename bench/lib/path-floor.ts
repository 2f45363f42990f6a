/**
 * The floor of the request path on this machine: what the least server built of the same parts
 * costs a sequential client, so that what the real server adds can be told from what the machine
 * charges for each hop between processes and threads (it varies several-fold between machines of
 * one kind). Two stand-ins, each its own process as the real ones are:
 * - `http`: an HTTP server that answers at once;
 * - `relay` and `echo`: an HTTP server that passes each call through Redis (LPUSH) to a second
 *   process, which pops it (BRPOP), sends it to its worker thread and back, and publishes it to
 *   the first, which answers: the hops of a lone request, without the work.
 * Run as a script, this file is one of those processes: `<role> <redis url> <key> <port>`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { Redis } from 'ioredis';
import { freePort } from '../../test/helpers/processes.ts';
import type { Summary } from './stats.ts';
import type { PathFloor } from './types.ts';

const SELF = fileURLToPath(import.meta.url);

type Role = 'http' | 'relay' | 'echo';

/** `echo`: pops each call, passes it through a worker thread, publishes it back. */
async function echo(redisUrl: string, key: string): Promise<void> {
  const blocking = new Redis(redisUrl);
  const publisher = new Redis(redisUrl);
  const thread = new Worker(`const { parentPort } = require('node:worker_threads'); parentPort.on('message', (m) => parentPort.postMessage(m));`, {
    eval: true,
  });
  await publisher.ping();
  console.log('ready');
  for (;;) {
    const popped = await blocking.brpop(key, 0);
    if (!popped) continue;
    const back = once(thread, 'message');
    thread.postMessage(popped[1]);
    const [id] = (await back) as [string];
    await publisher.publish(key, id);
  }
}

/** `http` answers at once; `relay` answers each call when its id comes back on the key's channel. */
async function serve(role: 'http' | 'relay', redisUrl: string, key: string, port: number): Promise<void> {
  const pending = new Map<string, http.ServerResponse>();
  let next = 0;
  const publisher = role === 'relay' ? new Redis(redisUrl) : undefined;
  if (role === 'relay') {
    const subscriber = new Redis(redisUrl);
    subscriber.on('message', (_channel: string, id: string) => {
      pending.get(id)?.end('ok');
      pending.delete(id);
    });
    await subscriber.subscribe(key);
  }
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (!publisher) return res.end('ok');
      const id = String(next++);
      pending.set(id, res);
      void publisher.lpush(key, id);
    });
  });
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  console.log('ready');
}

function start(role: Role, redisUrl: string, key: string, port: number): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', SELF, role, redisUrl, key, String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`path floor: ${role} exited (${code})`)));
    createInterface({ input: child.stdout }).once('line', () => resolve(child));
  });
}

/**
 * Both floors, timed by the caller's `time` (its own client and body, as it times the server: the
 * floor has the client's cost in it too); the caller keeps everything else idle meanwhile.
 */
export async function measurePathFloor(redisUrl: string, time: (url: string) => Promise<Summary>): Promise<PathFloor> {
  const key = `path-floor-${process.pid}`;
  const children: ChildProcess[] = [];
  try {
    const httpPort = await freePort();
    children.push(await start('http', redisUrl, key, httpPort));
    const plain = await time(`http://127.0.0.1:${httpPort}/`);
    const relayPort = await freePort();
    children.push(await start('echo', redisUrl, key, 0));
    children.push(await start('relay', redisUrl, key, relayPort));
    const relayed = await time(`http://127.0.0.1:${relayPort}/`);
    return { http: plain, relayed };
  } finally {
    for (const child of children) {
      child.removeAllListeners('exit');
      child.kill('SIGKILL');
    }
  }
}

if (process.argv[1] === SELF) {
  const [role, redisUrl, key, port] = process.argv.slice(2) as [Role, string, string, string];
  if (role === 'echo') await echo(redisUrl, key);
  else await serve(role, redisUrl, key, Number(port));
}
