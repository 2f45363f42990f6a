/**
 * The floor of shedding on this machine: the soak's load against the least server that sheds, an
 * HTTP server that answers every request with a 503 at once, while a process beside it runs the
 * model flat out at the workers' niceness, as a saturated worker would. What its 503s take is what
 * the machine charges any server for a refusal while the model holds the cores, so that it can be
 * told from what the gateway adds. Each runs as `stand-in.ts refuse <port>` or `stand-in.ts burn <model JSON>`.
 */
import { type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import os from 'node:os';
import { freePort } from '../../test/helpers/processes.ts';
import { loadInProcess } from './inprocess.ts';
import { startStandIn, stopStandIns } from './path-floor.ts';
import type { Summary } from './stats.ts';

/** What the burner runs: the model, on lists of `batch` copies of the text, at niceness `nice`, with the workers' session options. */
export interface Burn {
  model: string;
  modelDir: string;
  text: string;
  batch: number;
  nice: number;
  sessionOptions: Record<string, unknown>;
}

const REFUSAL = JSON.stringify({ error: 'the server is overloaded; retry later', error_type: 'overloaded' });

async function refuse(port: number): Promise<void> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(503, { 'content-type': 'application/json' }).end(REFUSAL));
  });
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  console.log('ready');
}

async function burn({ model, modelDir, text, batch, nice, sessionOptions }: Burn): Promise<void> {
  // Before the session starts: its threads take the niceness of the thread that creates them.
  os.setPriority(nice);
  const inproc = await loadInProcess(model, modelDir, sessionOptions);
  const list = Array.from({ length: batch }, () => text);
  console.log('ready');
  for (;;) await inproc.pipe(list);
}

/** The 503s' latency under `load` (which times the 503 answers of the URL it is given) beside the burner. */
export async function measureShedFloor(burnSpec: Burn, load: (url: string) => Promise<Summary>): Promise<Summary> {
  const children: ChildProcess[] = [];
  try {
    const port = await freePort();
    children.push(await startStandIn(['refuse', String(port)]));
    children.push(await startStandIn(['burn', JSON.stringify(burnSpec)]));
    return await load(`http://127.0.0.1:${port}`);
  } finally {
    stopStandIns(children);
  }
}

export type ShedRole = 'refuse' | 'burn';

/** Runs this process as the stand-in `role` (`stand-in.ts`), given its port or its model. */
export async function runShedStandIn(role: ShedRole, [arg]: string[]): Promise<void> {
  if (role === 'refuse') await refuse(Number(arg));
  else await burn(JSON.parse(arg) as Burn);
}
