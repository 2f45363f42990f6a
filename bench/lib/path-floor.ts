/**
 * The floor of the request path on this machine: what the least server built of the same parts
 * costs a sequential client, so that what the real server adds can be told from what the machine
 * charges for each hop between processes and threads (it varies several-fold between machines of
 * one kind). Stand-ins, each its own process as the real ones are:
 * - `http`: an HTTP server that answers at once;
 * - `relay` and `echo`: an HTTP server that passes each call through Redis (LPUSH) to a second
 *   process, which pops it (BRPOP), sends it to its worker thread and back, and publishes it to
 *   the first, which answers: the hops of a lone request, without the work.
 * - the least server: `relay` and `echo` again, the thread running the model on the request's text
 *   (`pipe(text)`, as in-process) before it answers. A model call leaves the other processes idle
 *   for milliseconds, and on some machines a wake after that costs several times one a moment
 *   later; the hops with no work behind them then understate what any server of these parts pays.
 * Each runs as `stand-in.ts <role> <redis url> <key> <port> [model JSON]`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import { createInterface } from 'node:readline';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { Redis } from 'ioredis';
import { freePort } from '../../test/helpers/processes.ts';
import { BUNDLES } from './bundle.ts';
import type { Summary } from './stats.ts';
import type { PathFloor } from './types.ts';

/** The stand-ins' entry: its bundle from the release archive, else its source, run with tsx. */
const STAND_IN = BUNDLES
  ? [path.join(BUNDLES, 'bench-stand-in.js')]
  : ['--import', 'tsx', fileURLToPath(new URL('./stand-in.ts', import.meta.url))];

/** What the stand-in's thread imports transformers.js from: the archive's bundle of it, else the package. */
const TRANSFORMERS = BUNDLES
  ? pathToFileURL(path.join(BUNDLES, 'bench-transformers.js')).href
  : import.meta.resolve('@huggingface/transformers');

/** The model a least server's thread runs: the bench's in-process model, with its dtype and device. */
export interface FloorModel {
  model: string;
  /** As the bench's in-process model was loaded (InProcessModel.load). */
  load: { modelDir: string; dtype: string; fileName?: string };
  device: string;
  text: string;
}

/**
 * The stand-in's thread: echoes each message, after running the model on the text when it has one.
 * Plain JavaScript, evaluated: worker threads do not inherit the TypeScript loader.
 */
const ECHO_THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
(async () => {
  const floor = workerData.model;
  let pipe;
  if (floor) {
    const { pipeline, env } = await import(workerData.transformers);
    env.allowRemoteModels = false;
    env.localModelPath = floor.load.modelDir;
    pipe = await pipeline('text-classification', floor.model, {
      dtype: floor.load.dtype,
      device: floor.device,
      ...(floor.load.fileName ? { model_file_name: floor.load.fileName } : {}),
    });
    for (let i = 0; i < 20; i++) await pipe(floor.text);
  }
  parentPort.on('message', async (m) => {
    if (pipe) await pipe(floor.text);
    parentPort.postMessage(m);
  });
  parentPort.postMessage('ready');
})();`;

export type PathRole = 'http' | 'relay' | 'echo';

/** `echo`: pops each call, passes it through a worker thread (which may run the model), publishes it back. */
async function echo(redisUrl: string, key: string, model?: FloorModel): Promise<void> {
  const blocking = new Redis(redisUrl);
  const publisher = new Redis(redisUrl);
  const thread = new Worker(ECHO_THREAD, {
    eval: true,
    workerData: { model, transformers: TRANSFORMERS },
  });
  await once(thread, 'message');
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

/** Starts a stand-in (`stand-in.ts`) as a process of its own, resolved once it prints its first line. */
export function startStandIn(args: string[]): Promise<ChildProcess> {
  const child = spawn(process.execPath, [...STAND_IN, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`stand-in ${args[0]} exited (${code})`)));
    createInterface({ input: child.stdout }).once('line', () => resolve(child));
  });
}

export function stopStandIns(children: ChildProcess[]): void {
  for (const child of children) {
    child.removeAllListeners('exit');
    child.kill('SIGKILL');
  }
}

const start = (role: PathRole, redisUrl: string, key: string, port: number, model?: FloorModel) =>
  startStandIn([role, redisUrl, key, String(port), ...(model ? [JSON.stringify(model)] : [])]);

/** The relay's call, timed by `time` against a relay and an echo (running `model`, if given). */
async function timeRelay(
  redisUrl: string,
  key: string,
  time: (url: string) => Promise<Summary>,
  children: ChildProcess[],
  model?: FloorModel,
): Promise<Summary> {
  const port = await freePort();
  children.push(await start('echo', redisUrl, key, 0, model));
  children.push(await start('relay', redisUrl, key, port));
  return time(`http://127.0.0.1:${port}/`);
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
    const relayed = await timeRelay(redisUrl, key, time, children);
    return { http: plain, relayed };
  } finally {
    stopStandIns(children);
  }
}

/**
 * The least server of the same parts running the model: the relay, its thread calling `pipe(text)`
 * for each request. No validation, batching, bookkeeping or JSON of the server's own: what it
 * measures beyond in-process is what this machine charges any server built this way.
 */
export async function measureLeastServer(
  redisUrl: string,
  time: (url: string) => Promise<Summary>,
  model: FloorModel,
): Promise<Summary> {
  const children: ChildProcess[] = [];
  try {
    return await timeRelay(redisUrl, `least-server-${process.pid}`, time, children, model);
  } finally {
    stopStandIns(children);
  }
}

/** Runs this process as the stand-in `role` (`stand-in.ts`), given `<redis url> <key> <port> [model JSON]`. */
export async function runPathStandIn(role: PathRole, [redisUrl, key, port, model]: string[]): Promise<void> {
  if (role === 'echo') await echo(redisUrl, key, model ? (JSON.parse(model) as FloorModel) : undefined);
  else await serve(role, redisUrl, key, Number(port));
}
