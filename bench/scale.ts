/**
 * Does throughput grow with workers? One Redis, one gateway (two with --second-gateway) and N
 * workers of one model, each with INTRA_OP_THREADS=k, for N = 1, 2, 4 … up to the machine's cores ÷ k.
 * For each N it measures closed-loop throughput at c = 64·N at each input length, beside in-process
 * pipe(list of 32) with one session of k threads (what one worker could do at most), and prints the
 * scaling efficiency (throughput at N ÷ (N × throughput at 1)), where the CPU went (each process, %
 * of one core), and Redis's commands and CPU per answered request.
 * Usage: npm run bench:scale [-- --threads 1 --workers 1,2 --tokens 16,128 --seconds 3 --warmup 1
 *        --per-worker 64 --second-gateway --model <id> --json <file>]
 * From the release archive, where the big hosts have no npm: `tserve bench-scale [-- the same]`.
 * --json writes the host, the settings, the ceiling and every point, as measured, to <file>.
 */
import fs from 'node:fs';
import os from 'node:os';
import { parseArgs } from 'node:util';
import { BenchSystem } from './lib/system.ts';
import { runLoad, type LoadResult } from './lib/load.ts';
import { loadInProcess, measureBatched } from './lib/inprocess.ts';
import { craftText, loadTokenizer } from './lib/texts.ts';
import { sessionOptions } from '../apps/worker/src/model/model.ts';
import { MODEL_DIR } from '../test/helpers/processes.ts';
import { DISTURBED_PCT } from './lib/cpu.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: 'replica/MiniLM-L6-H384-uncased-sst2' },
    threads: { type: 'string', default: '1' },
    workers: { type: 'string' },
    tokens: { type: 'string', default: '16,128' },
    seconds: { type: 'string', default: '3' },
    warmup: { type: 'string', default: '1' },
    'per-worker': { type: 'string', default: '64' },
    'second-gateway': { type: 'boolean', default: false },
    json: { type: 'string' },
  },
});
const model = values.model;
const threads = Number(values.threads);
const cores = os.availableParallelism();
/** 1, 2, 4 … up to cores ÷ k, and cores ÷ k itself where it is no power of two. */
function defaultCounts(): number[] {
  const most = Math.max(1, Math.floor(cores / threads));
  const counts: number[] = [];
  for (let n = 1; n <= most; n *= 2) counts.push(n);
  if (counts.at(-1) !== most) counts.push(most);
  return counts;
}
const counts = values.workers ? values.workers.split(',').map(Number) : defaultCounts();
const lengths = values.tokens.split(',').map(Number);
const seconds = Number(values.seconds);
const warmup = Number(values.warmup);
const perWorker = Number(values['per-worker']);
const BATCH = 32;

/**
 * What the workers run: k threads each, not spinning (spinning threads of several workers would
 * hold the cores the others need), at the niceness of the in-process ceiling they are compared with
 * (npm start's 19 would have them yield to everything else on a shared host), unless the environment says.
 */
const workerEnv = {
  INTRA_OP_THREADS: threads,
  INTRA_OP_SPINNING: process.env.INTRA_OP_SPINNING ?? 'false',
  WORKER_NICE: process.env.WORKER_NICE ?? '0',
};

const system = new BenchSystem({ modelDir: MODEL_DIR, logLevel: 'error' });

interface Row {
  workers: number;
  tokens: number;
  connections: number;
  result: LoadResult;
  /** The first gateway's share of the answers: Redis's cost was measured against its answers only. */
  measuredShare: number;
}

const pct = (v: number | undefined) => (v === undefined ? '-' : String(v));
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

try {
  const tokenizer = await loadTokenizer(model, MODEL_DIR);
  const texts = Object.fromEntries(lengths.map((t) => [t, craftText(tokenizer, t)]));

  // The ceiling first, with nothing else running: one session of k threads, batches of 32.
  const ceiling: Record<number, number> = {};
  const inproc = await loadInProcess(
    model,
    MODEL_DIR,
    sessionOptions({ INTRA_OP_THREADS: threads, INTRA_OP_SPINNING: workerEnv.INTRA_OP_SPINNING === 'true' }),
  );
  for (const t of lengths) ceiling[t] = (await measureBatched(inproc, texts[t], BATCH, seconds)).seqPerSec;
  await inproc.dispose();

  await system.startRedis();
  await system.startGateway();
  const urls = [system.url];
  if (values['second-gateway']) urls.push(await system.addGateway());
  await system.startWorker(model, workerEnv);

  const rows: Row[] = [];
  let running = 1;
  for (const n of counts) {
    while (running < n) {
      await system.addWorker(model, workerEnv);
      running++;
    }
    for (const t of lengths) {
      const connections = perWorker * n;
      const body = JSON.stringify({ inputs: texts[t] });
      // Split evenly over the gateways; only the first measures CPU and Redis, over the same window.
      const results = await Promise.all(
        urls.map((url, i) =>
          runLoad({
            url,
            path: `/models/${model}`,
            body,
            connections: Math.floor(connections / urls.length) + (i < connections % urls.length ? 1 : 0),
            warmupSeconds: warmup,
            durationSeconds: seconds,
            ...(i === 0 ? { pids: system.pids(), redisUrl: system.redisUrl } : {}),
          }),
        ),
      );
      const [first, ...others] = results;
      const rps = sum(results.map((r) => r.rps));
      rows.push({
        workers: n,
        tokens: t,
        connections,
        result: { ...first, rps },
        measuredShare: rps > 0 ? first.rps / rps : 1,
      });
      console.error(
        `N=${n} ${t} tokens c=${connections}: ${rps.toFixed(0)} req/s${others.length ? ` (gateways: ${results.map((r) => r.rps.toFixed(0)).join(' + ')})` : ''}`,
      );
    }
  }

  console.log(
    `${model}; ${cores} cores (${os.cpus()[0]?.model ?? '?'}); INTRA_OP_THREADS=${threads} per worker; ${urls.length} gateway(s); c = ${perWorker}·N; ${seconds} s per point after ${warmup} s`,
  );
  console.log(
    `in-process pipe(list of ${BATCH}), one session of ${threads} thread(s): ${lengths.map((t) => `${ceiling[t].toFixed(0)} seq/s at ${t} tokens`).join(', ')}`,
  );
  console.log('');
  console.log(`(disturbed: processes outside the bench took more than ${DISTURBED_PCT}% of a core meanwhile)`);
  console.log(
    '  N  tokens     c   req/s  efficiency  of N×ceiling  p50 ms  redis cmd  redis µs   CPU % of one core (gateway / workers / redis / bench / other)',
  );
  for (const row of rows) {
    const one = rows.find((r) => r.workers === 1 && r.tokens === row.tokens)?.result.rps;
    const efficiency = one ? row.result.rps / (row.workers * one) : NaN;
    const cpu = row.result.cpu;
    const procs = cpu?.procs ?? {};
    const byName = (prefix: string) => Object.entries(procs).filter(([name]) => name.startsWith(prefix));
    const workers = byName('worker:').map(([, v]) => v);
    const gateways = byName('gateway').map(([, v]) => v);
    const split = [
      gateways.join('+'),
      `${sum(workers)} (${workers.join('+')})`,
      pct(procs.redis),
      pct(procs.bench),
      pct(cpu?.other),
    ].join(' / ');
    console.log(
      [
        String(row.workers).padStart(3),
        String(row.tokens).padStart(7),
        String(row.connections).padStart(5),
        row.result.rps.toFixed(0).padStart(7),
        (Number.isFinite(efficiency) ? `${(efficiency * 100).toFixed(0)}%` : '-').padStart(11),
        `${((row.result.rps / (row.workers * ceiling[row.tokens])) * 100).toFixed(0)}%`.padStart(13),
        row.result.latency.p50.toFixed(1).padStart(7),
        (row.result.redis ? (row.result.redis.commandsPerRequest * row.measuredShare).toFixed(2) : '-').padStart(10),
        (row.result.redis ? (row.result.redis.processUsecPerRequest * row.measuredShare).toFixed(0) : '-').padStart(9),
        `   ${split}${(cpu?.other ?? 0) > DISTURBED_PCT ? '  disturbed' : ''}`,
      ].join(' '),
    );
  }
  if (values.json) {
    const host = { cores, cpu: os.cpus()[0]?.model ?? '?', hostname: os.hostname() };
    const settings = { model, threads, perWorker, seconds, warmup, gateways: urls.length, workerEnv };
    fs.writeFileSync(values.json, `${JSON.stringify({ host, settings, ceiling, rows }, null, 2)}\n`);
    console.log(`\nwrote ${values.json}`);
  }
} finally {
  await system.stop();
}
