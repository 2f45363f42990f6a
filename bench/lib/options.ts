import { parseArgs } from 'node:util';
import path from 'node:path';
import { BENCH_ROOT, MODEL_DIR_DEFAULT } from './paths.ts';

export interface BenchOptions {
  quick: boolean;
  models: string[];
  concurrencies: number[];
  lengths: number[];
  /** Measured seconds per load point, after `warmupSeconds` whose responses are discarded. */
  durationSeconds: number;
  warmupSeconds: number;
  /** One-at-a-time in-process calls whose p50/p99 is the floor the server is compared with. */
  singleCalls: number;
  /** Seconds of back-to-back pipe(list) calls per in-process batched throughput figure. */
  batchedSeconds: number;
  /** Back-to-back rounds of each target's in-process and server figures (lib/paired.ts), and the seconds of each side. */
  pairRounds: number;
  pairSeconds: number;
  soakSeconds: number;
  soakWarmupSeconds: number;
  soakFactor: number;
  /** Capacity (req/s) the soak's offered load is a multiple of; measured by the sweep unless given. */
  soakCapacity?: number;
  soakQueueDepth: number;
  soakTimeoutMs: number;
  mixedConcurrency: number;
  mixedEvery: number;
  mixedLongTokens: number;
  skip: Set<Phase>;
  url?: string;
  redisUrl?: string;
  gatewayPid?: number;
  modelDir: string;
  outDir: string;
  logLevel: string;
}

const PHASES = ['sweep', 'batch1', 'pairs', 'mixed', 'varied', 'soak'] as const;
type Phase = (typeof PHASES)[number];

/** The two models the bench and its A/B comparisons measure unless told others. */
export const DEFAULT_MODELS = [
  'replica/MiniLM-L6-H384-uncased-sst2',
  'replica/distilbert-base-uncased-finetuned-sst-2-english',
];

export const HELP = `tserve benchmark: closed-loop concurrency sweep, batching gain, mixed and varied lengths and an
overload soak, each compared with the same model run in-process (transformers.js) in this process, and
the worker's peak memory in each.

Usage: npm run bench -- [options]        (builds first)
       node --import tsx bench/run.ts [options]

Options:
  --quick                  short run (~3 min): 2 s per point, 0.5 s warm-up, 10 s soak
  --models a,b             model ids (default: ${DEFAULT_MODELS.join(',')})
  --concurrency 1,4,16,64  closed-loop concurrencies of the sweep
  --lengths 16,128         input lengths in tokens, special tokens included
  --duration S             measured seconds per point (default 10; quick 2)
  --warmup S               discarded seconds before each point (default 2; quick 0.5)
  --single-calls N         one-at-a-time in-process calls for p50/p99 (default 200; quick 60)
  --batched-seconds S      seconds per in-process batched throughput figure (default 2; quick 0.75)
  --pair-rounds N          rounds of in-process and server figures measured back to back for targets
                           (a) and (b), judged by their median (default 3; quick 2)
  --pair-seconds S         measured seconds of the server, and of in-process pipe(list), in each round
                           (default 4; quick 1.5)
  --soak-seconds S         measured seconds of the overload soak (default 60; quick 10)
  --soak-warmup S          seconds of soak load before the start RSS sample (default 10; quick 5)
  --soak-factor X          offered load as a multiple of measured capacity (default 2)
  --soak-capacity R        req/s to take as capacity instead of the sweep's best (lets the soak run alone)
  --soak-queue-depth N     MAX_QUEUE_DEPTH of the soak gateway (default 64)
  --soak-timeout-ms N      REQUEST_TIMEOUT_MS of the soak gateway (default 5000)
  --mixed-concurrency N    concurrency of the mixed-length run (default 64)
  --mixed-every N          one input in N is long (default 64)
  --mixed-long-tokens N    length of the long inputs (default 400)
                           (the varied run: texts of 1 to 400 words, at --mixed-concurrency)
  --skip a,b               phases to leave out: ${PHASES.join(', ')}
  --url URL                use a running gateway (no restarts: batch1 is skipped, the soak uses
                           that gateway's own MAX_QUEUE_DEPTH/REQUEST_TIMEOUT_MS)
  --gateway-pid PID        with --url: the gateway's pid, for the soak's RSS figures
  --redis-url URL          use this Redis (under a private QUEUE_PREFIX) instead of a private redis-server
  --model-dir DIR          models root (default ${MODEL_DIR_DEFAULT})
  --out DIR                results folder (default bench/results)
  --log-level L            LOG_LEVEL of the started gateway and workers (default error)
  -h, --help               this text

Server settings such as BATCH_MAX_WAIT_MS or INTRA_OP_THREADS are taken from the environment and
passed to the started processes (see node apps/worker/dist/main.js --help); the results record them.
BENCH_SERVER_NODE_ARGS adds node flags to the started gateway and workers, e.g.
BENCH_SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" to profile the server under load.
Output: a table on stdout, bench/results/<timestamp>.json, latest.json and latest.svg.
`;

const list = (v: string | undefined) =>
  (v ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
const numbers = (v: string, what: string) =>
  list(v).map((s) => {
    const n = Number(s);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`--${what}: "${s}" is not a positive number`);
    return n;
  });

function num(v: string | undefined, fallback: number, what: string): number {
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${what}: "${v}" is not a non-negative number`);
  return n;
}

export function parseOptions(argv: string[]): BenchOptions | 'help' {
  const { values } = parseArgs({
    args: argv,
    options: {
      help: { type: 'boolean', short: 'h' },
      quick: { type: 'boolean' },
      models: { type: 'string' },
      concurrency: { type: 'string' },
      lengths: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      'single-calls': { type: 'string' },
      'batched-seconds': { type: 'string' },
      'pair-rounds': { type: 'string' },
      'pair-seconds': { type: 'string' },
      'soak-seconds': { type: 'string' },
      'soak-warmup': { type: 'string' },
      'soak-factor': { type: 'string' },
      'soak-capacity': { type: 'string' },
      'soak-queue-depth': { type: 'string' },
      'soak-timeout-ms': { type: 'string' },
      'mixed-concurrency': { type: 'string' },
      'mixed-every': { type: 'string' },
      'mixed-long-tokens': { type: 'string' },
      skip: { type: 'string' },
      url: { type: 'string' },
      'gateway-pid': { type: 'string' },
      'redis-url': { type: 'string' },
      'model-dir': { type: 'string' },
      out: { type: 'string' },
      'log-level': { type: 'string' },
    },
    strict: true,
  });
  if (values.help) return 'help';
  const quick = Boolean(values.quick);
  const skip = new Set(list(values.skip) as Phase[]);
  for (const s of skip) if (!PHASES.includes(s)) throw new Error(`--skip: unknown phase "${s}" (${PHASES.join(', ')})`);
  const options: BenchOptions = {
    quick,
    models: values.models ? list(values.models) : DEFAULT_MODELS,
    concurrencies: values.concurrency ? numbers(values.concurrency, 'concurrency').map(Math.round) : [1, 4, 16, 64],
    lengths: values.lengths ? numbers(values.lengths, 'lengths').map(Math.round) : [16, 128],
    durationSeconds: num(values.duration, quick ? 2 : 10, 'duration'),
    warmupSeconds: num(values.warmup, quick ? 0.5 : 2, 'warmup'),
    singleCalls: Math.max(10, Math.round(num(values['single-calls'], quick ? 60 : 200, 'single-calls'))),
    batchedSeconds: num(values['batched-seconds'], quick ? 0.75 : 2, 'batched-seconds'),
    pairRounds: Math.max(1, Math.round(num(values['pair-rounds'], quick ? 2 : 3, 'pair-rounds'))),
    pairSeconds: num(values['pair-seconds'], quick ? 1.5 : 4, 'pair-seconds'),
    soakSeconds: num(values['soak-seconds'], quick ? 10 : 60, 'soak-seconds'),
    soakWarmupSeconds: num(values['soak-warmup'], quick ? 5 : 10, 'soak-warmup'),
    soakFactor: num(values['soak-factor'], 2, 'soak-factor'),
    soakCapacity: values['soak-capacity'] ? num(values['soak-capacity'], 0, 'soak-capacity') : undefined,
    soakQueueDepth: Math.round(num(values['soak-queue-depth'], 64, 'soak-queue-depth')),
    soakTimeoutMs: Math.round(num(values['soak-timeout-ms'], 5000, 'soak-timeout-ms')),
    mixedConcurrency: Math.round(num(values['mixed-concurrency'], 64, 'mixed-concurrency')),
    mixedEvery: Math.max(2, Math.round(num(values['mixed-every'], 64, 'mixed-every'))),
    mixedLongTokens: Math.round(num(values['mixed-long-tokens'], 400, 'mixed-long-tokens')),
    skip,
    url: values.url?.replace(/\/+$/, ''),
    redisUrl: values['redis-url'],
    gatewayPid: values['gateway-pid'] ? Math.round(num(values['gateway-pid'], 0, 'gateway-pid')) : undefined,
    modelDir: path.resolve(values['model-dir'] ?? MODEL_DIR_DEFAULT),
    outDir: path.resolve(values.out ?? path.join(BENCH_ROOT, 'results')),
    logLevel: values['log-level'] ?? 'error',
  };
  if (options.models.length === 0) throw new Error('--models: name at least one model');
  // A running gateway cannot be restarted with BATCH_MAX_SIZE=1 from here.
  if (options.url) options.skip.add('batch1');
  return options;
}
