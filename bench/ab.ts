/**
 * This checkout against another built one, in interleaved rounds on one machine with one load tool:
 * both systems run side by side (each its own Redis, gateway and worker), and each round measures
 * them one after the other, the order swapped every round, so that the machine's drift favours
 * neither. Per model, round and side: p50 at c=1 (16 tokens), requests/s at c=64, and Redis
 * commands per answered request at both; per round, in-process pipe(text) p50 beside them, the
 * floor of the c=1 figure. It prints each figure's median over the rounds, and B/A.
 * `--traces`: B's gateway and workers export their spans (OTEL_EXPORTER_OTLP_ENDPOINT) to a
 * receiver here that reads and drops them, to measure tracing on against a checkout without it.
 * `--as <built checkout>`: B runs that checkout instead of this one, to bisect between two others.
 * `--set KEY=VALUE,...`: settings for B's gateway and workers only, to measure a setting's effect.
 * Usage: npm run bench:ab -- --against <built checkout> [--as <built checkout>] [--set K=V,...] [--models a,b] [--rounds 4] [--seconds 5] [--warmup 15] [--traces]
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import path from 'node:path';
import { BenchSystem } from './lib/system.ts';
import { DEFAULT_MODELS } from './lib/options.ts';
import { runLoad } from './lib/load.ts';
import { costPerRequest, readRedisCpu, readRedisStats, resetRedisStats } from './lib/redis-cost.ts';
import { loadInProcess, measureSingles } from './lib/inprocess.ts';
import { craftText, loadTokenizer } from './lib/texts.ts';
import { median, round } from './lib/stats.ts';
import { sideRows, type SidePoints } from './lib/side-rows.ts';
import { sampleCpu } from './lib/cpu.ts';
import { parseSettings } from './lib/settings.ts';
import { MODEL_DIR } from '../test/helpers/processes.ts';
import { taskFromConfig, type TaskConfig } from '../apps/worker/src/model/detect.ts';

const { values } = parseArgs({
  options: {
    against: { type: 'string' },
    as: { type: 'string' },
    set: { type: 'string', default: '' },
    models: { type: 'string', default: DEFAULT_MODELS.join(',') },
    rounds: { type: 'string', default: '4' },
    seconds: { type: 'string', default: '5' },
    warmup: { type: 'string', default: '15' },
    traces: { type: 'boolean', default: false },
  },
});
if (!values.against) {
  process.stderr.write(
    'usage: npm run bench:ab -- --against <another checkout, built> [--models a,b] [--rounds 4] [--seconds 5]\n',
  );
  process.exit(2);
}
const models = values.models.split(',');
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
let spansReceived = 0;
const receiver = values.traces
  ? http.createServer((req, res) => {
      req.on('data', () => {});
      req.on('end', () => {
        spansReceived++;
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    })
  : undefined;
if (receiver) await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const bEnv = {
  ...parseSettings(values.set),
  ...(receiver ? { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}` } : {}),
};
const sides = {
  A: new BenchSystem({ modelDir: MODEL_DIR, logLevel: 'error', root: path.resolve(values.against) }),
  B: new BenchSystem({ modelDir: MODEL_DIR, logLevel: 'error', root: values.as ? path.resolve(values.as) : undefined }),
};
type Side = keyof typeof sides;

interface Point {
  p50: number;
  rps: number;
  commands: number;
  /** Lua script calls (EVALSHA and EVAL) per answered request: BullMQ's scripts. */
  scripts: number;
  /** The redis-server process's CPU per answered request (µs). */
  redisUs: number;
  /** CPU of every process of the side (gateway, worker, Redis) per answered request (ms). */
  cpuMs: number;
  /** The same, each role's part: the gateway's, the workers' and Redis's. */
  gatewayMs: number;
  workerMs: number;
  redisMs: number;
}

type Role = 'gateway' | 'worker' | 'redis';

/** User + system CPU of a side's processes (ms) by role, from /proc: the bench's own process excluded. */
function sideCpuMs(system: BenchSystem): Record<Role, number> {
  const { procs } = sampleCpu({ ...system.pids(), bench: undefined });
  const byRole: Record<Role, number> = { gateway: 0, worker: 0, redis: 0 };
  // A process that has left (the previous model's worker) reads as NaN.
  for (const [name, ticks] of Object.entries(procs))
    if (Number.isFinite(ticks)) byRole[name.split(/[:#]/)[0] as Role] += ticks * 10;
  return byRole;
}

/** Closed-loop requests of `text` to a side's `model` from `connections` clients. */
function loadOf(system: BenchSystem, model: string, text: string, connections: number) {
  return { url: system.url, path: `/models/${model}`, body: JSON.stringify({ inputs: text }), connections };
}

/** One closed-loop point against a side, with what it cost that side's Redis per answered request. */
async function point(side: Side, model: string, text: string, connections: number): Promise<Point> {
  const system = sides[side];
  const spec = loadOf(system, model, text, connections);
  await runLoad({ ...spec, warmupSeconds: 0, durationSeconds: 1 });
  await resetRedisStats(system.redisUrl);
  const cpu = await readRedisCpu(system.redisUrl);
  const cpuBefore = sideCpuMs(system);
  const load = await runLoad({ ...spec, warmupSeconds: 0, durationSeconds: seconds });
  const cpuAfter = sideCpuMs(system);
  const answered = Math.round(load.rps * load.seconds);
  const perRequest = (role: Role) => (cpuAfter[role] - cpuBefore[role]) / Math.max(1, answered);
  const cost = costPerRequest(await readRedisStats(system.redisUrl), cpu, answered);
  if (load.errors) throw new Error(`${side} ${model} c=${connections}: ${load.errors} errors`);
  const scripts = (cost.byCommand.evalsha ?? 0) + (cost.byCommand.eval ?? 0);
  return {
    p50: load.latency.p50,
    rps: load.rps,
    commands: cost.commandsPerRequest,
    scripts,
    redisUs: cost.processUsecPerRequest,
    cpuMs: perRequest('gateway') + perRequest('worker') + perRequest('redis'),
    gatewayMs: perRequest('gateway'),
    workerMs: perRequest('worker'),
    redisMs: perRequest('redis'),
  };
}

/**
 * Each side answers at c=1 and at c=64 for `--warmup` seconds before the rounds: V8 goes on
 * optimizing a lone request's functions for tens of seconds at c=1, on a thread of its own, and
 * that compiling cost 0.35 ms a request in each of the gateway and the worker over a 6-second
 * point just after start (bench/HISTORY.md): a start-up cost, not one a served request pays.
 */
async function warmUp(text: string, model: string): Promise<void> {
  for (const system of Object.values(sides))
    for (const connections of [1, 64])
      await runLoad({
        ...loadOf(system, model, text, connections),
        warmupSeconds: 0,
        durationSeconds: Number(values.warmup),
      });
}

try {
  for (const [name, side] of Object.entries(sides)) {
    await side.startRedis();
    await side.startGateway(name === 'B' ? bEnv : {});
  }
  for (const model of models) {
    for (const [name, side] of Object.entries(sides)) await side.startWorker(model, name === 'B' ? bEnv : {});
    const text = craftText(await loadTokenizer(model, MODEL_DIR), 16);
    // The floor runs the model's own task: an embedding model's pipeline has no logits to classify.
    const config = JSON.parse(fs.readFileSync(path.join(MODEL_DIR, model, 'config.json'), 'utf8')) as TaskConfig;
    const task = taskFromConfig(config) === 'feature-extraction' ? 'feature-extraction' : 'text-classification';
    const inProcess = await loadInProcess(model, MODEL_DIR, undefined, { task });
    const results: Record<Side, SidePoints<Point>> = { A: { c1: [], c64: [] }, B: { c1: [], c64: [] } };
    const floor: number[] = [];
    await warmUp(text, model);
    for (let r = 0; r < rounds; r++) {
      floor.push((await measureSingles(inProcess, text, 200)).p50);
      const order: Side[] = r % 2 ? ['B', 'A'] : ['A', 'B'];
      for (const side of order) {
        results[side].c1.push(await point(side, model, text, 1));
        results[side].c64.push(await point(side, model, text, 64));
      }
      process.stderr.write(`${model}: round ${r + 1} of ${rounds} done\n`);
    }
    await inProcess.dispose();
    const { med, row } = sideRows(results, {
      first: { side: 'A', label: 'A' },
      second: { side: 'B', label: 'B' },
      over: 'B',
      width: 26,
    });
    console.log(
      `${model}, 16 tokens, ${rounds} interleaved rounds of ${seconds} s per point; medians${receiver ? `; B traces on (${spansReceived} exports received so far)` : ''}`,
    );
    console.log(
      `  in-process pipe(text) p50 ${round(median(floor), 2)} ms (${floor.map((f) => round(f, 2)).join(' ')})`,
    );
    console.log(row('c=1 p50 (ms)', 'c1', 'p50', 2));
    console.log(
      `  c=1 p50 over in-process     A +${round(med('A', 'c1', 'p50') - median(floor), 2)} ms  B +${round(med('B', 'c1', 'p50') - median(floor), 2)} ms`,
    );
    console.log(row('c=64 req/s', 'c64', 'rps', 0));
    console.log(row('c=1 Redis cmd/request', 'c1', 'commands', 1));
    console.log(row('c=64 Redis cmd/request', 'c64', 'commands', 2));
    console.log(row('c=1 Lua scripts/request', 'c1', 'scripts', 2));
    console.log(row('c=1 Redis CPU µs/request', 'c1', 'redisUs', 0));
    console.log(row('c=64 Redis CPU µs/request', 'c64', 'redisUs', 0));
    console.log(row('c=1 CPU ms/request, all', 'c1', 'cpuMs', 2));
    console.log(row('c=64 CPU ms/request, all', 'c64', 'cpuMs', 2));
    for (const [at, label] of [
      ['c1', 'c=1'],
      ['c64', 'c=64'],
    ] as const)
      for (const role of ['gateway', 'worker', 'redis'] as const)
        console.log(row(`${label} CPU ms/request, ${role}`, at, `${role}Ms`, 3));
    for (const side of Object.values(sides)) await side.workers.get(model)?.stop('SIGTERM', 3000);
    for (const side of Object.values(sides)) await side.waitForWorkers(model, 0);
  }
} finally {
  await Promise.allSettled(Object.values(sides).map((side) => side.stop()));
  receiver?.close();
}
