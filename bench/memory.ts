/**
 * `npm run bench:memory`: a worker's peak memory and throughput under the varied load (texts of 1 to
 * 400 words, closed loop), for worker settings compared in interleaved rounds. Each round starts a
 * fresh worker per variant, in turn (the order reversed every other round, so that the machine's
 * drift favours none), drives the same texts in the same order at it, and reads the worker's peak
 * RSS (VmHWM: the kernel's high-water mark, which no sampling can miss), its RSS at the end of the
 * load and once idle after it, its requests/s, and the largest model call it ran (tokens, from the
 * gateway's /metrics). It prints each figure's median over the rounds, and each variant's over the
 * first's.
 *
 * With --session instead, each variant is a set of ONNX Runtime session options, and each run
 * replays the model calls a worker makes under the same texts in a process of its own
 * (lib/replay.ts): the session's memory and speed without the rest of the system.
 *
 * Usage: npm run bench:memory -- [--model m] [--variant name[@built checkout]:K=V,K=V]... [--rounds 3]
 *          [--seconds 20] [--warmup 3] [--concurrency 64] [--words 1-400]
 *        npm run bench:memory -- [--model m] --session 'name:{"enableCpuMemArena":false}'... [--rounds 3]
 *          [--texts 256] [--words 1-400]
 * Without --variant: the worker's defaults alone. `name@<dir>` runs that variant's worker from another built
 * checkout (e.g. the commit before a change), behind the same gateway. Anything else in the environment reaches the
 * started processes, as in `npm run bench`. Results: bench/results/memory-<time>.json.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { BenchSystem } from './lib/system.ts';
import { runLoad } from './lib/load.ts';
import { variedTexts } from '../test/helpers/texts.ts';
import { median, round } from './lib/stats.ts';
import { BENCH_ROOT } from './lib/paths.ts';
import type { ReadyBody } from '@tserve/contract';
import { MODEL_DIR, processMemory, readMetric, sleep, waitFor } from '../test/helpers/processes.ts';

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: 'replica/all-MiniLM-L6-v2' },
    variant: { type: 'string', multiple: true },
    session: { type: 'string', multiple: true },
    texts: { type: 'string', default: '256' },
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '20' },
    warmup: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '64' },
    words: { type: 'string', default: '1-400' },
    'model-dir': { type: 'string', default: MODEL_DIR },
  },
});

interface Variant {
  name: string;
  env: Record<string, string>;
  /** Another built checkout to run the worker from (`name@<dir>:...`): the same gateway, another worker. */
  root?: string;
  /** ONNX Runtime session options over the worker's (--session). */
  session?: Record<string, unknown>;
}

function parseSession(spec: string): Variant {
  const colon = spec.indexOf(':');
  if (colon < 1) throw new Error(`--session ${spec}: not name:{json}`);
  return { name: spec.slice(0, colon), env: {}, session: JSON.parse(spec.slice(colon + 1)) as Record<string, unknown> };
}

function parseVariant(spec: string): Variant {
  const colon = spec.indexOf(':');
  const [name, root] = (colon < 0 ? spec : spec.slice(0, colon)).split('@');
  const pairs =
    colon < 0
      ? []
      : spec
          .slice(colon + 1)
          .split(',')
          .filter(Boolean);
  const env = Object.fromEntries(
    pairs.map((pair) => {
      const eq = pair.indexOf('=');
      if (eq < 1) throw new Error(`--variant ${spec}: "${pair}" is not NAME=VALUE`);
      return [pair.slice(0, eq), pair.slice(eq + 1)];
    }),
  );
  return { name, env, ...(root ? { root: path.resolve(root) } : {}) };
}

const model = values.model;
const replay = values.session !== undefined;
const variants = replay ? values.session!.map(parseSession) : (values.variant ?? ['defaults']).map(parseVariant);
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const warmup = Number(values.warmup);
const concurrency = Number(values.concurrency);
const [minWords, maxWords] = values.words.split('-').map(Number);
if (![rounds, seconds, warmup, concurrency, minWords, maxWords].every(Number.isFinite))
  throw new Error('bench:memory: numeric options must be numbers');

interface Run {
  variant: string;
  round: number;
  /** Peak RSS of the worker process over its life (VmHWM), MiB. */
  peakMiB: number;
  /** RSS as the load ended, and once the requests in flight were answered and it idled 2 s, MiB. */
  endMiB: number;
  idleMiB: number;
  rps: number;
  statuses: Record<string, number>;
  /** Padded tokens of the largest model call the worker ran, as its heartbeat reported it. */
  largestCallTokens: number;
}

const log = (message: string) => process.stderr.write(`[bench:memory] ${message}\n`);
const texts = variedTexts(4096, minWords, maxWords);
const bodies = texts.map((text) => JSON.stringify({ inputs: text }));
const system = new BenchSystem({ modelDir: path.resolve(values['model-dir']), logLevel: 'error' });
const runs: Run[] = [];

async function measure(variant: Variant, r: number): Promise<Run> {
  await system.restartWorker(model, variant.env, variant.root);
  const pid = system.workers.get(model)?.pid;
  let sent = 0;
  const load = await runLoad({
    url: system.url,
    path: `/models/${model}`,
    body: () => bodies[sent++ % bodies.length],
    connections: concurrency,
    warmupSeconds: warmup,
    durationSeconds: seconds,
  });
  const end = processMemory(pid);
  // The requests still in flight run to the end (the largest call may be among them), and one more
  // heartbeat carries the largest call.
  await waitFor(
    'the queue to drain',
    async () => ((await (await fetch(`${system.url}/ready`)).json()) as ReadyBody).models[model]?.queue_depth === 0,
    600_000,
    200,
  );
  await sleep(2000);
  const idle = processMemory(pid);
  const largest = await readMetric(system.url, 'tserve_worker_largest_call_tokens', { model });
  if (!end || !idle) throw new Error(`worker of ${variant.name} gone:\n${system.workers.get(model)?.output ?? ''}`);
  return {
    variant: variant.name,
    round: r,
    peakMiB: round(idle.peak, 1),
    endMiB: round(end.rss, 1),
    idleMiB: round(idle.rss, 1),
    rps: round(load.rps, 1),
    statuses: load.status,
    largestCallTokens: largest,
  };
}

/** One replay of the worker's model calls in a process of its own (lib/replay.ts), with the variant's session options. */
async function measureReplay(variant: Variant, r: number): Promise<Run> {
  const args = [
    '--import',
    'tsx',
    path.join(BENCH_ROOT, 'lib/replay.ts'),
    model,
    path.resolve(values['model-dir']),
    JSON.stringify(variant.session),
  ];
  const child = spawn(process.execPath, [...args, values.texts, String(minWords), String(maxWords)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  if (code !== 0) throw new Error(`replay of ${variant.name} exited with ${code}: ${out}`);
  const result = JSON.parse(out.trim().split('\n').at(-1)!) as {
    textsPerSecond: number;
    peakMiB: number;
    endMiB: number;
  };
  return {
    variant: variant.name,
    round: r,
    peakMiB: round(result.peakMiB, 1),
    endMiB: round(result.endMiB, 1),
    idleMiB: round(result.endMiB, 1),
    rps: round(result.textsPerSecond, 2),
    statuses: {},
    largestCallTokens: NaN,
  };
}

// Ctrl-C stops what the bench started.
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.once(signal, () => void system.stop().finally(() => process.exit(130)));

try {
  if (!replay) {
    await system.startRedis();
    await system.startGateway();
  }
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 ? [...variants].reverse() : variants;
    for (const variant of order) {
      const run = replay ? await measureReplay(variant, r) : await measure(variant, r);
      runs.push(run);
      log(
        replay
          ? `round ${r + 1} ${variant.name}: peak ${run.peakMiB} MiB, end ${run.endMiB}; ${run.rps} texts/s`
          : `round ${r + 1} ${variant.name}: peak ${run.peakMiB} MiB, end ${run.endMiB}, idle ${run.idleMiB}; ${run.rps} req/s; largest call ${run.largestCallTokens} tokens; ${JSON.stringify(run.statuses)}`,
      );
    }
  }
} finally {
  await system.stop();
}

const figure = (name: string, pick: (run: Run) => number) =>
  round(median(runs.filter((x) => x.variant === name).map(pick)), 2);
const each = (name: string, pick: (run: Run) => number) =>
  runs
    .filter((x) => x.variant === name)
    .map(pick)
    .join(', ');
const first = variants[0].name;
const versus = (name: string, pick: (run: Run) => number) =>
  name === first ? '' : ` (${round(figure(name, pick) / figure(first, pick), 3)}×)`;
const settingsOf = ({ env, session, root }: Variant) =>
  (root ? `(${path.basename(root)}) ` : '') +
  (session ? JSON.stringify(session) : '') +
  Object.entries(env)
    .map(([k, v]) => `${k}=${v}`)
    .join(' ');
const peak = (x: Run) => x.peakMiB;
const rps = (x: Run) => x.rps;
const lines = [
  `${model}, ${minWords}-${maxWords} words, ${replay ? `${values.texts} texts replayed` : `c=${concurrency}, ${seconds} s after ${warmup} s`}, ${rounds} rounds: medians [each round], and the ratio to ${first}`,
  `| variant | settings | peak RSS MiB | RSS at the end | ${replay ? '' : 'idle | '}${replay ? 'texts/s' : 'req/s'} |${replay ? '' : ' largest call (tokens) |'}`,
  `|---|---|---|---|---|${replay ? '' : '---|---|'}`,
  ...variants
    .map((v) =>
      [
        v.name,
        settingsOf(v) || '(defaults)',
        `${figure(v.name, peak)}${versus(v.name, peak)} [${each(v.name, peak)}]`,
        figure(v.name, (x) => x.endMiB),
        ...(replay ? [] : [figure(v.name, (x) => x.idleMiB)]),
        `${figure(v.name, rps)}${versus(v.name, rps)} [${each(v.name, rps)}]`,
        ...(replay ? [] : [figure(v.name, (x) => x.largestCallTokens)]),
      ].join(' | '),
    )
    .map((row) => `| ${row} |`),
];
process.stdout.write(`${lines.join('\n')}\n`);
const out = path.join(BENCH_ROOT, 'results', `memory-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(
  out,
  JSON.stringify({ model, variants, rounds, seconds, warmup, concurrency, words: [minWords, maxWords], runs }, null, 2),
);
process.stdout.write(`wrote ${out}\n`);
