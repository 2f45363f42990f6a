/**
 * OpenAI's Batch API against the same lines sent by closed-loop HTTP clients (issue 60's targets):
 *   1. throughput: N embedding lines as one batch (from `batches.create` to `completed`), and the
 *      same N request bodies sent by --concurrency closed-loop HTTP clients, in interleaved rounds;
 *   2. an interactive client's latency alone, and while a batch runs (the batch class at work).
 * Usage: npm run bench:batches [-- --lines 10000 --concurrency 64 --rounds 2 --seconds 10 --model <id>
 *        --workers 1 --threads <k>]: N workers of the model, each with INTRA_OP_THREADS=k where given
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import OpenAI, { toFile } from 'openai';
import { createKey } from '../apps/gateway/src/admission/api-keys.ts';
import { BenchSystem } from './lib/system.ts';
import { summarize, type Summary } from './lib/stats.ts';
import { loadTokenizer, craftText } from './lib/texts.ts';
import { cpuBetween, sampleCpu } from './lib/cpu.ts';
import { MODEL_DIR } from '../test/helpers/processes.ts';

const { values } = parseArgs({
  options: {
    lines: { type: 'string', default: '10000' },
    concurrency: { type: 'string', default: '64' },
    rounds: { type: 'string', default: '2' },
    seconds: { type: 'string', default: '10' },
    tokens: { type: 'string', default: '16' },
    model: { type: 'string', default: 'replica/all-MiniLM-L6-v2' },
    workers: { type: 'string', default: '1' },
    threads: { type: 'string' },
  },
});
const lines = Number(values.lines);
const concurrency = Number(values.concurrency);
const model = values.model;

const user = createKey({ name: 'user', models: ['*'], priority: 'interactive' });
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-bench-batches-'));
const keysFile = path.join(dir, 'keys.json');
fs.writeFileSync(keysFile, JSON.stringify({ keys: [user.entry] }));

const system = new BenchSystem({ modelDir: MODEL_DIR, logLevel: 'error' });
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency + 1 });

function post(body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${system.url}/v1/embeddings`,
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${user.token}` },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** The bodies sent by `concurrency` closed-loop clients, each taking the next; lines per second. */
async function closedLoop(bodies: string[]): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < bodies.length) {
        const status = await post(bodies[next++]);
        if (status !== 200) throw new Error(`closed loop: status ${status}`);
      }
    }),
  );
  return bodies.length / ((performance.now() - started) / 1000);
}

/** The same bodies as one batch, from its creation to its end; lines per second. */
async function asBatch(client: OpenAI, fileId: string): Promise<number> {
  const started = performance.now();
  const batch = await client.batches.create({
    input_file_id: fileId,
    endpoint: '/v1/embeddings',
    completion_window: '24h',
  });
  for (;;) {
    const now = await client.batches.retrieve(batch.id);
    if (now.status === 'completed') {
      if (now.request_counts?.completed !== lines) throw new Error(`batch: ${JSON.stringify(now.request_counts)}`);
      return lines / ((performance.now() - started) / 1000);
    }
    if (['failed', 'expired', 'cancelled'].includes(now.status)) throw new Error(`batch ended ${now.status}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Sequential interactive requests for `ms`, or until `stop` says so; their latencies. */
async function interactiveClient(ms: number, stop = () => false): Promise<Summary> {
  const times: number[] = [];
  const until = performance.now() + ms;
  for (let i = 0; performance.now() < until && !stop(); i++) {
    const started = performance.now();
    if ((await post(JSON.stringify({ model, input: `an interactive request number ${i}` }))) === 200)
      times.push(performance.now() - started);
  }
  return summarize(times);
}

try {
  await system.startRedis();
  await system.startGateway({ API_KEYS_FILE: keysFile, FILES_STORE_MAX_MB: '4096' });
  // Several workers share the cores as bench:scale's do: k threads each, not spinning against each other.
  const workerEnv = values.threads ? { INTRA_OP_THREADS: values.threads, INTRA_OP_SPINNING: 'false' } : {};
  await system.startWorker(model, workerEnv);
  for (let n = 2; n <= Number(values.workers); n++) await system.addWorker(model, workerEnv);
  const tokenizer = await loadTokenizer(model, MODEL_DIR);
  const texts = Array.from({ length: 50 }, (_, i) => craftText(tokenizer, Number(values.tokens), i * 7));
  const requests = Array.from({ length: lines }, (_, i) => ({ model, input: texts[i % texts.length] }));
  const bodies = requests.map((body) => JSON.stringify(body));
  const jsonl = requests.map((body, i) =>
    JSON.stringify({ custom_id: `l${i}`, method: 'POST', url: '/v1/embeddings', body }),
  );
  const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey: user.token, maxRetries: 0 });
  const file = await client.files.create({
    file: await toFile(Buffer.from(`${jsonl.join('\n')}\n`), 'lines.jsonl'),
    purpose: 'batch',
  });
  // The bench's own process is the HTTP clients: counted, as the batch's runner is in the gateway.
  const pids = {
    gateway: system.gateway?.child.pid,
    worker: system.workers.get(model)?.child.pid,
    clients: process.pid,
    redis: system.redis?.proc?.child.pid,
    ...Object.fromEntries(system.moreWorkers.map((w, i) => [`worker ${i + 2}`, w.proc.child.pid])),
  };
  /** CPU ms of each process between two samples, and of all of them. */
  const cpuMs = (a: ReturnType<typeof sampleCpu>, b: ReturnType<typeof sampleCpu>) => {
    const { procs } = cpuBetween(a, b);
    const ms = (pct: number) => (pct / 100) * (b.at - a.at);
    return { all: ms(Object.values(procs).reduce((sum, pct) => sum + pct, 0)), gateway: ms(procs.gateway ?? 0) };
  };

  type Row = {
    round: number;
    http: number;
    batch: number;
    httpCpu: { all: number; gateway: number };
    batchCpu: { all: number; gateway: number };
  };
  const rows: Row[] = [];
  for (let round = 1; round <= Number(values.rounds); round++) {
    let before = sampleCpu(pids);
    const httpRate = await closedLoop(bodies);
    const httpCpu = cpuMs(before, sampleCpu(pids));
    before = sampleCpu(pids);
    const batchRate = await asBatch(client, file.id);
    const batchCpu = cpuMs(before, sampleCpu(pids));
    rows.push({ round, http: httpRate, batch: batchRate, httpCpu, batchCpu });
  }

  const seconds = Number(values.seconds);
  const alone = await interactiveClient(seconds * 1000);
  let ended = false;
  const running = asBatch(client, file.id).finally(() => (ended = true));
  await new Promise((r) => setTimeout(r, 500));
  const during = await interactiveClient(seconds * 1000, () => ended);
  await running;

  const f = (v: number, w = 9) => v.toFixed(1).padStart(w);
  console.log(`${model}, ${lines} lines of ${values.tokens} tokens; HTTP: ${concurrency} closed-loop clients`);
  console.log('round   HTTP lines/s  batch lines/s  batch/HTTP   CPU ms/line, all: HTTP  batch   gateway: HTTP  batch');
  const per = (ms: number) => (ms / lines).toFixed(3).padStart(7);
  for (const r of rows)
    console.log(
      `${String(r.round).padEnd(6)} ${f(r.http, 13)} ${f(r.batch, 14)} ${(r.batch / r.http).toFixed(3).padStart(11)}        ${per(r.httpCpu.all)} ${per(r.batchCpu.all)}         ${per(r.httpCpu.gateway)} ${per(r.batchCpu.gateway)}`,
    );
  const ratios = rows.map((r) => r.batch / r.http).sort((a, b) => a - b);
  console.log(
    `batch/HTTP, median of ${rows.length} interleaved rounds: ${ratios[Math.floor((ratios.length - 1) / 2)].toFixed(3)} (lower median)`,
  );
  // The max too: a request held for seconds ends the client's run at the batch's end, so it is one of few, past the p99.
  console.log(
    `interactive p50/p99/max alone        ${f(alone.p50)} ${f(alone.p99)} ${f(alone.max)} ms (${alone.count} requests)`,
  );
  console.log(
    `interactive p50/p99/max during batch ${f(during.p50)} ${f(during.p99)} ${f(during.max)} ms (${during.count} requests)`,
  );
  console.log(`p99 during / alone: ${(during.p99 / alone.p99).toFixed(2)}x`);
} finally {
  agent.destroy();
  await system.stop();
  fs.rmSync(dir, { recursive: true, force: true });
}
