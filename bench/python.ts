/**
 * tserve against the server our users would otherwise write (bench/python-server.py: the Hugging
 * Face guide's Starlette server written well, onnxruntime on the model's q8 file, a 1 ms batching
 * deadline), side by side on one machine with one load tool, in interleaved rounds: both servers
 * run at once, and each round measures them one after the other, the order swapped every round.
 * Both get the same request, `POST /` with a 16-token text (--lengths) as its whole body, from autocannon at
 * c=1 and c=64. Per point: requests/s, p50 and p99, and the CPU per answered request of all of a
 * side's processes (tserve: gateway, worker and Redis). It prints each figure's median over the
 * rounds and tserve/Python.
 * Needs python3 with starlette, uvicorn, uvloop, httptools, onnxruntime, tokenizers and numpy.
 * Usage: npm run bench:python [-- --models a,b --rounds 4 --seconds 5 --warmup 10 --set KEY=VALUE,... --vs KEY=VALUE,...]
 *   --set: settings for tserve's gateway and worker (DTYPE=q8 runs the Python server's own file).
 *   --vs: a second tserve, with these settings over --set's, measured in the same rounds: two
 *   settings compared with each other, each against the Python server.
 *   --workers, --vs-workers: workers of the model for each (1; the second's, the first's).
 *   --lengths 16,128: the texts' lengths in tokens, special tokens included, one after the other.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { BenchSystem } from './lib/system.ts';
import { DEFAULT_MODELS } from './lib/options.ts';
import { runLoad } from './lib/load.ts';
import { sampleCpu } from './lib/cpu.ts';
import { craftText, loadTokenizer } from './lib/texts.ts';
import { sideRows, type SidePoints } from './lib/side-rows.ts';
import { median, round } from './lib/stats.ts';
import { parseSettings } from './lib/settings.ts';
import { freePort, MODEL_DIR, waitFor } from '../test/helpers/processes.ts';

const { values } = parseArgs({
  options: {
    models: { type: 'string', default: DEFAULT_MODELS.join(',') },
    rounds: { type: 'string', default: '4' },
    seconds: { type: 'string', default: '5' },
    warmup: { type: 'string', default: '10' },
    set: { type: 'string', default: '' },
    vs: { type: 'string' },
    workers: { type: 'string', default: '1' },
    lengths: { type: 'string', default: '16' },
    'vs-workers': { type: 'string' },
  },
});
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const settings = parseSettings(values.set);
const other = values.vs === undefined ? undefined : { ...settings, ...parseSettings(values.vs) };

type Side = 'tserve' | 'other' | 'python';
interface Point {
  rps: number;
  p50: number;
  p99: number;
  /** User and system CPU of every process of the side, per answered request (ms). */
  cpuMs: number;
  /** The same, process by process (tserve: gateway, worker, Redis). */
  byProcess: Record<string, number>;
}

/** The Python server for `model`, answering once its model is loaded. */
async function startPython(model: string): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const script = path.join(import.meta.dirname, 'python-server.py');
  const child = spawn('python3', [script, path.join(MODEL_DIR, model), String(port)], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  // Without its packages it exits at once, having said which one it lacks.
  const exited = new Promise<never>((_, reject) =>
    child.once('exit', (code) => reject(new Error(`the Python server exited (${code}): see bench/python-server.py`))),
  );
  await Promise.race([
    exited,
    waitFor(
      'the Python server',
      async () => (await fetch(`${url}/`, { method: 'POST', body: 'ready?' }).catch(() => undefined))?.ok === true,
      60_000,
    ),
  ]);
  exited.catch(() => undefined);
  return { url, child };
}

/** CPU of each of the side's processes so far, in ms. */
function cpuMs(pids: Record<string, number | undefined>): Record<string, number> {
  const { procs } = sampleCpu(pids);
  return Object.fromEntries(
    Object.entries(procs).map(([name, ticks]) => [name, Number.isFinite(ticks) ? ticks * 10 : 0]),
  );
}

/** Closed-loop `POST /` of `text` as the whole body, from `connections` clients, as both servers take it. */
const loadOf = (url: string, text: string, connections: number) => ({
  url,
  path: '/',
  body: text,
  connections,
  headers: { 'content-type': 'text/plain' },
});

async function point(url: string, pids: Record<string, number | undefined>, text: string, connections: number) {
  const spec = loadOf(url, text, connections);
  await runLoad({ ...spec, warmupSeconds: 0, durationSeconds: 1 });
  const before = cpuMs(pids);
  const load = await runLoad({ ...spec, warmupSeconds: 0, durationSeconds: seconds });
  const after = cpuMs(pids);
  const answered = Math.max(1, Math.round(load.rps * load.seconds));
  if (load.errors || Object.keys(load.status).some((s) => s !== '200'))
    throw new Error(`${url} c=${connections}: ${JSON.stringify(load.status)}, ${load.errors} errors`);
  const byProcess = Object.fromEntries(
    Object.keys(after).map((name) => [name, (after[name] - (before[name] ?? 0)) / answered]),
  );
  const total = Object.values(byProcess).reduce((a, b) => a + b, 0);
  return { rps: load.rps, p50: load.latency.p50, p99: load.latency.p99, cpuMs: total, byProcess };
}

/** A system of a gateway, its Redis and `workers` workers of `model`, with `env` for all. */
async function tserve(model: string, env: Record<string, string>, workers: number): Promise<BenchSystem> {
  const system = new BenchSystem({ modelDir: MODEL_DIR, logLevel: 'error' });
  await system.startRedis();
  await system.startGateway({ DEFAULT_MODEL: model, ...env });
  await system.startWorker(model, env);
  for (let i = 1; i < workers; i++) await system.addWorker(model, env);
  return system;
}

/** Where tserve's CPU per request goes at each point, process by process: the medians over the rounds. */
function byProcess(label: string, points: SidePoints<Point>): void {
  for (const at of ['c1', 'c64'] as const) {
    const names = Object.keys(points[at][0].byProcess);
    const each = names.map((name) => `${name} ${round(median(points[at].map((p) => p.byProcess[name])), 3)}`);
    console.log(`  ${`${at === 'c1' ? 'c=1' : 'c=64'} ${label} CPU ms/request`.padEnd(22)} ${each.join(', ')}`);
  }
}

const FIGURES: Array<[string, keyof SidePoints<Point>, keyof Point, number]> = [
  ['c=1 p50 (ms)', 'c1', 'p50', 2],
  ['c=1 p99 (ms)', 'c1', 'p99', 2],
  ['c=1 CPU ms/request', 'c1', 'cpuMs', 2],
  ['c=64 req/s', 'c64', 'rps', 0],
  ['c=64 p50 (ms)', 'c64', 'p50', 1],
  ['c=64 p99 (ms)', 'c64', 'p99', 1],
  ['c=64 CPU ms/request', 'c64', 'cpuMs', 2],
];

type Sides = Partial<Record<Side, { url: string; pids: Record<string, number | undefined> }>>;

/** Every side at c=1 and c=64 on `text`, in interleaved rounds; then each figure's medians and ratios. */
async function measure(model: string, tokens: number, sides: Sides, text: string): Promise<void> {
  const measured = Object.keys(sides) as Side[];
  const points = Object.fromEntries(measured.map((side) => [side, { c1: [], c64: [] }])) as unknown as Record<
    Side,
    SidePoints<Point>
  >;
  for (const side of Object.values(sides))
    for (const connections of [1, 64])
      await runLoad({
        ...loadOf(side.url, text, connections),
        warmupSeconds: 0,
        durationSeconds: Number(values.warmup),
      });
  for (let r = 0; r < rounds; r++) {
    // Each round in another order, so that the machine's drift falls on every side alike.
    const order = measured.map((_, i) => measured[(i + r) % measured.length]);
    for (const side of order) {
      points[side].c1.push(await point(sides[side]!.url, sides[side]!.pids, text, 1));
      points[side].c64.push(await point(sides[side]!.url, sides[side]!.pids, text, 64));
    }
    process.stderr.write(`${model}, ${tokens} tokens: round ${r + 1} of ${rounds} done\n`);
  }
  const against = (side: 'tserve' | 'other', label: string) =>
    sideRows(points, { first: { side, label }, second: { side: 'python', label: 'Python' }, over: side, width: 22 });
  console.log(
    `${model}, POST / of a ${tokens}-token text, ${rounds} interleaved rounds of ${seconds} s per point; medians${values.set ? `; tserve with ${values.set}` : ''}${values.vs ? `; other: ${values.vs}` : ''}`,
  );
  // The same model on every side: the same label, and scores apart only by the int8 kernels' rounding.
  const answers = await Promise.all(
    Object.values(sides).map(async (side) => (await fetch(`${side.url}/`, { method: 'POST', body: text })).text()),
  );
  console.log(`  the answers: ${measured.map((side, i) => `${side} ${answers[i]}`).join(', ')}`);
  for (const [name, at, figure, digits] of FIGURES)
    console.log(against('tserve', 'tserve').row(name, at, figure, digits));
  byProcess('tserve', points.tserve);
  if (points.other) {
    for (const [name, at, figure, digits] of FIGURES)
      console.log(against('other', 'other').row(name, at, figure, digits));
    byProcess('other', points.other);
    const versus = sideRows(points, {
      first: { side: 'other', label: 'other' },
      second: { side: 'tserve', label: 'tserve' },
      over: 'other',
      width: 22,
    });
    for (const [name, at, figure, digits] of FIGURES) console.log(versus.row(name, at, figure, digits));
  }
}

for (const model of values.models.split(',')) {
  const systems: BenchSystem[] = [];
  let python: Awaited<ReturnType<typeof startPython>> | undefined;
  try {
    const workers = Number(values.workers);
    systems.push(await tserve(model, settings, workers));
    if (other) systems.push(await tserve(model, other, Number(values['vs-workers'] ?? workers)));
    python = await startPython(model);
    const sides: Sides = {
      tserve: { url: systems[0].url, pids: { ...systems[0].pids(), bench: undefined } },
      ...(systems[1] ? { other: { url: systems[1].url, pids: { ...systems[1].pids(), bench: undefined } } } : {}),
      python: { url: python.url, pids: { python: python.child.pid } },
    };
    const tokenizer = await loadTokenizer(model, MODEL_DIR);
    for (const tokens of values.lengths.split(',').map(Number))
      await measure(model, tokens, sides, craftText(tokenizer, tokens));
  } finally {
    python?.child.kill('SIGTERM');
    await Promise.all(systems.map((system) => system.stop()));
  }
}
