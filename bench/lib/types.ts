import type { CpuUsage } from './cpu.ts';
import type { GatewayGc } from './gateway-gc.ts';
import type { BatchedResult } from './inprocess.ts';
import type { LoadResult } from './load.ts';
import type { Summary } from './stats.ts';

/** The shape of bench/results/*.json; report, chart and targets read only this. */

export interface InputText {
  tokens: number;
  chars: number;
  text: string;
}

interface InProcessSingles {
  tokens: number;
  latency: Summary;
  cpu: CpuUsage;
}

interface InProcessBatched extends BatchedResult {
  tokens: number;
  cpu: CpuUsage;
}

export interface ServerPoint {
  model: string;
  tokens: number;
  concurrency: number;
  /** 'sweep': default settings; 'batch1': worker restarted with BATCH_MAX_SIZE=1; 'varied': texts of 1 to 400 words (`tokens` is the longest's). */
  kind: 'sweep' | 'batch1' | 'varied';
  load: LoadResult;
}

export interface MixedRun {
  model: string;
  concurrency: number;
  every: number;
  shortTokens: number;
  longTokens: number;
  mixed: LoadResult;
  /** The all-short run at the same concurrency: the sweep's point. */
  allShortRps: number;
  allShortBatchMean: number;
  /** In-process: all-short cycle time over mixed cycle time, the best ratio a server could show. */
  inProcessIdeal?: { shortOnlyMs: number; mixedMs: number; idealRatio: number; batchSize: number };
}

export interface RssSample {
  second: number;
  mib: number | undefined;
}

export interface SoakRun {
  model: string;
  tokens: number;
  capacityRps: number;
  targetRate: number;
  seconds: number;
  warmupSeconds: number;
  queueDepth?: number;
  timeoutMs?: number;
  load: LoadResult;
  counts: { ok: number; shed: number; timeout: number; other: number; socketErrors: number };
  acceptedLatency: Summary;
  shedLatency: Summary;
  rss: { start?: number; end?: number; max?: number; afterDrain?: number; samples: RssSample[] };
  /** Redis used_memory in MiB when the measured window starts and ends (a Redis the bench started). */
  redisMiB?: { start?: number; end?: number };
  /** The gateway's collections in the measured window, by kind (lib/gateway-gc.ts). */
  gatewayGc?: GatewayGc;
  /** A request right after the soak: the gateway still answers normally. */
  recoveredStatus?: number;
  /** The same load's 503s from the least server that sheds, beside the model run flat out (lib/shed-floor.ts). */
  shedFloor?: Summary;
}

export interface GatewayCost {
  concurrency: number;
  status: string;
  perSec: number;
  p50: number;
  p99: number;
  gatewayCpuPct: number;
  cpuMsPerRequest: number;
}

export interface ModelResults {
  model: string;
  /** Where the model ran in-process and on the workers (DEVICE/DTYPE), e.g. webgpu and fp16. */
  device?: string;
  dtype?: string;
  texts: Record<string, InputText>;
  singles: InProcessSingles[];
  batched: InProcessBatched[];
  /** The server's answer against in-process for the same text: same label, and how far the scores are. */
  answerCheck?: { text: string; sameLabel: boolean; maxScoreDiff: number };
  /** The c=1 load, shortest text, against the least server of the same parts running this model (lib/path-floor.ts). */
  leastServer?: Summary;
  /** Targets (a) and (b)'s two sides, measured back to back in rounds (lib/paired.ts). */
  paired?: PairedComparison[];
}

/** One round of a target's comparison: its in-process figure and the server's, measured one right after the other. */
export interface PairedRound {
  /** At c=1, pipe(text) p50 in ms; above, pipe(list of batchSize) in sequences/s. */
  inProcess: number;
  /** At c=1, the server's p50 in ms; above, its requests/s. */
  server: number;
}

export interface PairedComparison {
  tokens: number;
  concurrency: number;
  /** The pipe(list) size compared above c=1: the mean batch the server formed at this point of the sweep. */
  batchSize: number;
  rounds: PairedRound[];
}

/** Latency of stand-ins for the request path, with no work behind them (lib/path-floor.ts). */
export interface PathFloor {
  /** The HTTP round trip alone. */
  http: Summary;
  /** HTTP, through Redis to a second process and its worker thread, and back. */
  relayed: Summary;
}

export interface TargetResult {
  id: string;
  name: string;
  pass: boolean | null;
  detail: string;
}

export interface BenchResults {
  meta: {
    startedAt: string;
    finishedAt: string;
    elapsedSeconds: number;
    argv: string[];
    options: Record<string, unknown>;
    machine: { cpus: number; cpuModel: string; memGiB: number; node: string };
    serverSettings: Record<string, string>;
    target: string;
    quietWaitSeconds: number;
    quietRetries: number;
  };
  models: ModelResults[];
  points: ServerPoint[];
  mixed: MixedRun[];
  soak?: SoakRun;
  gatewayCost?: GatewayCost;
  /** The same c=1 load against stand-ins with the path's hops and no work (lib/path-floor.ts). */
  pathFloor?: PathFloor;
  targets: TargetResult[];
}
