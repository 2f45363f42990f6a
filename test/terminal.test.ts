/**
 * Issue 61, a person at a terminal: with LOG_FORMAT left at auto, a process writes readable lines
 * where its stdout is a terminal (a pseudo-terminal from util-linux's `script`, as a shell gives
 * `npm start`), and JSON lines where it is a pipe, as log collectors and the other tests read it.
 */
import { spawn } from 'node:child_process';
import { stripVTControlCharacters } from 'node:util';
import path from 'node:path';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { freePort, Proc, waitFor } from './helpers/processes.ts';
import { uniquePrefix } from './helpers/system.ts';

const GATEWAY = path.resolve(import.meta.dirname, '../apps/gateway/dist/main.js');
/** Colours and the pseudo-terminal's carriage returns, which a reader's eye skips. */
const plain = (text: string) => stripVTControlCharacters(text).replace(/\r/g, '');

async function gatewayLines(terminal: boolean): Promise<string[]> {
  const env = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    PORT: String(await freePort()),
    GRPC_PORT: String(await freePort()),
    QUEUE_PREFIX: uniquePrefix('terminal'),
  };
  const child = terminal
    ? spawn('script', ['-qfec', `exec '${process.execPath}' '${GATEWAY}'`, '/dev/null'], {
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      })
    : spawn(process.execPath, [GATEWAY], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  const gateway = new Proc(terminal ? 'gateway at a terminal' : 'gateway into a pipe', child);
  try {
    await waitFor('the gateway listening', async () => plain(gateway.output).includes('gateway listening on'), 20_000);
  } finally {
    await gateway.stop('SIGTERM');
  }
  return plain(gateway.output)
    .split('\n')
    .filter((line) => line.includes('gateway listening on'));
}

describe('logs at a terminal', () => {
  it('readable lines to a terminal, JSON lines to a pipe', async () => {
    const [readable] = await gatewayLines(true);
    assert.match(readable, /^\[\d\d:\d\d:\d\d\] INFO: gateway: gateway listening on http:\/\/0\.0\.0\.0:\d+/);
    const [json] = await gatewayLines(false);
    assert.equal((JSON.parse(json) as { service: string }).service, 'gateway');
  });
});
