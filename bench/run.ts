/**
 * `npm run bench`: starts Redis, the gateway and one worker per model (or uses --url), then runs
 * the concurrency sweep, the BATCH_MAX_SIZE=1 comparison, the mixed-length run and the overload
 * soak, each beside the same model run in-process, and judges the performance targets.
 * See bench/lib/options.ts (or --help) for the flags.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ReadyBody } from '@tserve/contract';
import { QuietGate } from './lib/cpu.ts';
import type { BenchContext } from './lib/context.ts';
import { drawChart } from './lib/chart.ts';
import { measureGatewayCost } from './lib/gateway-cost.ts';
import { runModelPhase } from './lib/model-phase.ts';
import { HELP, parseOptions, type BenchOptions } from './lib/options.ts';
import { formatReport, writeResults } from './lib/report.ts';
import { runSoak } from './lib/soak.ts';
import { BenchSystem } from './lib/system.ts';
import { evaluateTargets } from './lib/targets.ts';
import { craftText, loadTokenizer } from './lib/texts.ts';
import type {
  BenchResults,
  GatewayCost,
  MixedRun,
  ModelResults,
  PathFloor,
  ServerPoint,
  SoakRun,
} from './lib/types.ts';
import { measurePathFloor } from './lib/path-floor.ts';
import { runLoad } from './lib/load.ts';
import { round } from './lib/stats.ts';

/** Server settings read from the environment that change what is measured; recorded with the results. */
const RECORDED_SETTINGS = [
  'WORKER_NICE',
  'BATCH_MAX_SIZE',
  'BATCH_MAX_WAIT_MS',
  'BATCH_MAX_TOKENS',
  'INTRA_OP_THREADS',
  'INTRA_OP_SPINNING',
  'DTYPE',
  'DEVICE',
  'HEARTBEAT_MS',
  'REGISTRY_REFRESH_MS',
  'RESULT_POLL_MS',
];

function readOptions(): BenchOptions {
  try {
    const parsed = parseOptions(process.argv.slice(2));
    if (parsed !== 'help') return parsed;
    process.stdout.write(HELP);
    process.exit(0);
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n\n${HELP}`);
    process.exit(2);
  }
}
const options = readOptions();

const started = new Date();
const log = (message: string) =>
  process.stderr.write(`[bench ${((Date.now() - started.getTime()) / 1000).toFixed(0).padStart(4)} s] ${message}\n`);

const system = options.url
  ? undefined
  : new BenchSystem({ modelDir: options.modelDir, logLevel: options.logLevel, redisUrl: options.redisUrl });
// Waiting for quiet and re-running disturbed figures are capped so a busy machine cannot stretch the run unboundedly.
// With --url the server's processes are unknown, so their CPU counts as "other": no re-runs then.
const gate = new QuietGate(options.quick ? 15_000 : 120_000, options.url ? 0 : options.quick ? 3 : 10);
const ctx: BenchContext = {
  options,
  url: () => options.url ?? system!.url,
  pids: () => (system ? system.pids() : { bench: process.pid, gateway: options.gatewayPid }),
  system,
  gate,
  log,
};

let stopping = false;
async function shutdown(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    await system?.stop().catch(() => {});
  }
  process.exit(code);
}
process.on('SIGINT', () => void shutdown(130));
process.on('SIGTERM', () => void shutdown(143));

/** The c=1 point's load against the path's stand-ins, before the server starts: they have the machine to themselves. */
async function measureFloor(redisUrl: string): Promise<PathFloor> {
  const floor = await measurePathFloor(redisUrl, async (url) => {
    const load = await runLoad({
      url,
      path: '/',
      body: 'x',
      connections: 1,
      warmupSeconds: options.warmupSeconds,
      durationSeconds: options.durationSeconds,
    });
    return load.latency;
  });
  log(
    `path floor at c=1, no work: HTTP alone p50 ${round(floor.http.p50)} ms; + Redis and a worker thread p50 ${round(floor.relayed.p50)} ms`,
  );
  return floor;
}

async function main(): Promise<void> {
  let pathFloor: PathFloor | undefined;
  if (system) {
    log('starting redis, gateway and workers');
    await system.startRedis();
    if (options.concurrencies.includes(1) && !options.skip.has('sweep'))
      pathFloor = await measureFloor(system.redisUrl);
    await system.startGateway();
    for (const model of options.models) await system.startWorker(model);
  } else {
    const ready = await fetch(`${options.url}/ready`)
      .then((r) => r.json())
      .catch((err) => {
        throw new Error(`cannot reach ${options.url}/ready: ${String(err)}`);
      });
    for (const model of options.models) {
      if (!(ready as ReadyBody).models?.[model]) throw new Error(`${options.url} does not serve ${model}`);
    }
  }

  const models: ModelResults[] = [];
  const points: ServerPoint[] = [];
  const mixed: MixedRun[] = [];
  for (const model of options.models) {
    const phase = await runModelPhase(ctx, model);
    models.push(phase.results);
    points.push(...phase.points);
    if (phase.mixed) mixed.push(phase.mixed);
  }

  let soak: SoakRun | undefined;
  let gatewayCost: GatewayCost | undefined;
  if (!options.skip.has('soak')) {
    const model = options.models[0];
    const tokens = Math.min(...options.lengths);
    const measured = points
      .filter((p) => p.kind === 'sweep' && p.model === model && p.tokens === tokens)
      .map((p) => p.load.rps);
    const capacity = options.soakCapacity ?? (measured.length ? Math.max(...measured) : NaN);
    const text = models[0].texts[tokens]?.text ?? craftText(await loadTokenizer(model, options.modelDir), tokens);
    if (Number.isFinite(capacity) && capacity > 0) {
      soak = await runSoak(ctx, model, text, tokens, capacity);
      gatewayCost = await measureGatewayCost(ctx, model, text);
    } else log('soak skipped: no capacity measured (the sweep was skipped; see --soak-capacity)');
  }

  const finished = new Date();
  const partial: Omit<BenchResults, 'targets'> = {
    meta: {
      startedAt: started.toISOString(),
      finishedAt: finished.toISOString(),
      elapsedSeconds: (finished.getTime() - started.getTime()) / 1000,
      argv: process.argv.slice(2),
      options: { ...options, skip: [...options.skip] },
      machine: {
        cpus: os.cpus().length,
        cpuModel: os.cpus()[0]?.model ?? '?',
        memGiB: Math.round(os.totalmem() / 2 ** 30),
        node: process.version,
      },
      serverSettings: Object.fromEntries(
        RECORDED_SETTINGS.filter((k) => process.env[k] !== undefined).map((k) => [k, process.env[k]!]),
      ),
      target: options.url ?? 'started by the bench',
      quietWaitSeconds: gate.waitedMs / 1000,
      quietRetries: gate.retried,
    },
    models,
    points,
    mixed,
    soak,
    gatewayCost,
    pathFloor,
  };
  const results: BenchResults = {
    ...partial,
    targets: evaluateTargets(partial, options.lengths, options.concurrencies),
  };

  const files = writeResults(options.outDir, results);
  const svg = path.join(options.outDir, 'latest.svg');
  fs.writeFileSync(svg, drawChart(results));
  process.stdout.write(`${formatReport(results)}\n\nwrote ${files.json}, ${files.latest} and ${svg}\n`);
}

main()
  .then(() => shutdown(0))
  .catch(async (err) => {
    process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    if (system) {
      for (const p of [system.gateway, ...system.workers.values()])
        if (p?.output) process.stderr.write(`--- ${p.name} ---\n${p.output}\n`);
    }
    await shutdown(1);
  });
