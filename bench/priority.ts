/**
 * Interactive latency under a bulk flood, with and without priority classes, in one run:
 *   1. an interactive client alone (sequential requests): its unloaded p50/p99;
 *   2. the same client while a bulk key floods the model at --concurrency in the batch class;
 *   3. the same flood from a key in the interactive class (no priorities: first come, first served).
 * Usage: npm run bench:priority [-- --seconds 10 --concurrency 64 --model <id>]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { createKey } from '../apps/gateway/src/admission/api-keys.ts';
import { BenchSystem } from './lib/system.ts';
import { runLoad } from './lib/load.ts';
import { summarize, type Summary } from './lib/stats.ts';
import { MODEL_DIR } from '../test/helpers/processes.ts';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    concurrency: { type: 'string', default: '64' },
    model: { type: 'string', default: 'replica/MiniLM-L6-H384-uncased-sst2' },
  },
});
const seconds = Number(values.seconds);
const concurrency = Number(values.concurrency);
const model = values.model;

const interactive = createKey({ name: 'interactive', models: ['*'], priority: 'interactive' });
const bulkBatch = createKey({ name: 'bulk-batch', models: ['*'], priority: 'batch' });
const bulkSame = createKey({ name: 'bulk-interactive', models: ['*'], priority: 'interactive' });
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-bench-keys-'));
const keysFile = path.join(dir, 'keys.json');
fs.writeFileSync(keysFile, JSON.stringify({ keys: [interactive.entry, bulkBatch.entry, bulkSame.entry] }));

const system = new BenchSystem({ modelDir: MODEL_DIR, logLevel: 'error' });
const body = (text: string) => JSON.stringify({ inputs: text });

/** Sequential interactive requests for `ms`; their latencies. */
async function interactiveClient(ms: number): Promise<Summary> {
  const times: number[] = [];
  const until = performance.now() + ms;
  for (let i = 0; performance.now() < until; i++) {
    const started = performance.now();
    const res = await fetch(`${system.url}/models/${model}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${interactive.token}` },
      body: body(`an interactive request number ${i}`),
    });
    await res.arrayBuffer();
    if (res.ok) times.push(performance.now() - started);
  }
  return summarize(times);
}

async function underFlood(bulkToken: string): Promise<{ interactive: Summary; bulkRps: number }> {
  const flood = runLoad({
    url: system.url,
    path: `/models/${model}`,
    body: body('a bulk backfill document of moderate length for the flood'),
    connections: concurrency,
    warmupSeconds: 1,
    durationSeconds: seconds + 1,
    headers: { authorization: `Bearer ${bulkToken}` },
  });
  await new Promise((r) => setTimeout(r, 1500));
  const measured = await interactiveClient(seconds * 1000);
  return { interactive: measured, bulkRps: (await flood).rps };
}

try {
  await system.startRedis();
  await system.startGateway({ API_KEYS_FILE: keysFile, MAX_QUEUE_DEPTH: 100_000 });
  await system.startWorker(model);
  await interactiveClient(2000);
  const alone = await interactiveClient(seconds * 1000);
  const withPriorities = await underFlood(bulkBatch.token);
  const withoutPriorities = await underFlood(bulkSame.token);
  const f = (v: number) => v.toFixed(1).padStart(8);
  console.log(
    `${model}, interactive client: sequential requests; bulk flood: ${concurrency} connections, ${seconds} s each`,
  );
  console.log('                                        p50      p99   bulk req/s   (ms)');
  console.log(`interactive alone                  ${f(alone.p50)} ${f(alone.p99)}`);
  console.log(
    `under a batch-class flood          ${f(withPriorities.interactive.p50)} ${f(withPriorities.interactive.p99)} ${f(withPriorities.bulkRps)}`,
  );
  console.log(
    `under an interactive-class flood   ${f(withoutPriorities.interactive.p50)} ${f(withoutPriorities.interactive.p99)} ${f(withoutPriorities.bulkRps)}`,
  );
  console.log(
    `p99 vs alone: with priorities ${(withPriorities.interactive.p99 / alone.p99).toFixed(2)}x, without ${(withoutPriorities.interactive.p99 / alone.p99).toFixed(2)}x`,
  );
} finally {
  await system.stop();
  fs.rmSync(dir, { recursive: true, force: true });
}
