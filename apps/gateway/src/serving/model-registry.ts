import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { PROTOCOL, type DefaultScoreFunction, type ModelDownload, type Task, type WorkerInfo } from '@tserve/contract';
import {
  describeRedisFailure,
  listLiveWorkers,
  listLoadFailures,
  listLoadTimes,
  type LoadFailure,
} from '@tserve/queue';

export interface ServedModel {
  id: string;
  /** The model's own task: what a request that names none runs. */
  task: Task;
  /** Every task it serves, its own first. */
  tasks: Task[];
  /** A classifier's labels, in output order. */
  labels?: string[];
  /** The function a text-classification call applies to the logits by default, if the workers said. */
  scoreFunction?: DefaultScoreFunction;
  /** Longest sequence the model accepts, in tokens. */
  maxLength: number;
  workers: WorkerInfo[];
  /** The weights its workers loaded, where they all agree (a rollout may mix two for a while). */
  weights: ModelWeights;
}

/** Which weights answer: the hub revision (a commit id where known) and the weights file's sha256. */
export interface ModelWeights {
  revision?: string;
  sha256?: string;
  /** What runs (WorkerInfo.weightsFile). */
  file?: string;
}

/** Before any worker of a model has announced its batch size; the worker's own default. */
const DEFAULT_JOB_SEQUENCES = 32;
/** A loading model's estimate when no load of it has been measured yet, in seconds. */
const UNKNOWN_LOAD_SECONDS = 20;

/** Workers of a model that speak another wire protocol: this gateway sends them nothing. */
export interface MismatchedModel {
  id: string;
  /** Their protocol numbers, each once. */
  protocols: number[];
  /** Why they get no work from this gateway, in a sentence. */
  reason: string;
}

/**
 * A model whose first worker is still to come: announced by workers still loading it, or, scaled to
 * zero, configured (MODELS) with no worker at all, while the autoscaler starts one.
 */
export interface LoadingModel {
  id: string;
  /** Configured and no worker runs: one is still to be started (by the autoscaler, on the backlog). */
  idle?: true;
  /**
   * Seconds until the first of its workers is likely ready: the rest of its download at the rate
   * measured, then its last measured load time, less the time spent loading so far.
   */
  estimatedSeconds: number;
  /** The download of the worker likely ready first, while it downloads the model's files. */
  download?: ModelDownload;
}

/**
 * What the workers say they serve (live, loading, failed to load), read from their heartbeats in
 * Redis in the background so that the request path reads it from memory: no Redis round trip per
 * request for routing; and the models the gateway is configured to serve (MODELS), which may have no
 * worker at all (scaled to zero). How loaded a model is, is admission's business (`overload.ts`).
 */
/**
 * What the registry knows of one model, in one answer. `last` is the model as its workers last
 * announced it, where none is live, loading or of another protocol: the response cache may still
 * answer what they computed.
 */
export type ModelStatus =
  | { kind: 'served'; model: ServedModel }
  /** Its first worker is still to come: loading, or configured with none (scaled to zero). */
  | { kind: 'starting'; starting: LoadingModel; last?: ServedModel }
  /** Announced only by workers of another protocol. */
  | { kind: 'mismatched'; mismatch: MismatchedModel }
  /** Its worker could not load it, and none serves it since. */
  | { kind: 'failed'; failure: LoadFailure; last?: ServedModel }
  /** Served earlier, and no live worker serves it now. */
  | { kind: 'lost'; last?: ServedModel }
  /** Not known, and Redis cannot be read to know better. */
  | { kind: 'unreachable'; last?: ServedModel }
  | { kind: 'unknown'; last?: ServedModel };

export class ModelRegistry {
  private models = new Map<string, ServedModel>();
  /** Models that had a live worker at some point; one with none left is reported as down. */
  private readonly known = new Map<string, Task>();
  /** Each model as its live workers last announced it: what the response cache answers from once none is left. */
  private readonly lastServed = new Map<string, ServedModel>();
  /** Models whose worker reported it could not load them, and has no live worker since. */
  private failures = new Map<string, LoadFailure>();
  /** Models announced only by workers of another protocol. */
  private mismatched = new Map<string, MismatchedModel>();
  /** Workers of another protocol already logged, so that each is logged once. */
  private readonly reportedMismatches = new Set<string>();
  /** Models announced by loading workers only. */
  private loadingModels = new Map<string, LoadingModel>();
  /** How long each model's last load took (ms), as its workers measured it. */
  private loadTimes = new Map<string, number>();
  /** Called after each successful refresh (requests waiting for a model to finish loading). */
  private readonly listeners = new Set<() => void>();
  private timer?: NodeJS.Timeout;
  lastError?: string;
  lastRefreshAt = 0;

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly refreshMs: number,
    private readonly failureTtlMs: number,
    private readonly logger: Logger,
    /** MODELS: served even with no worker (scaled to zero). */
    private readonly configuredIds: readonly string[] = [],
  ) {}

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.refreshMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  get(model: string): ServedModel | undefined {
    return this.models.get(model);
  }

  /** The model's status: the one question the request path asks of the registry. */
  status(model: string): ModelStatus {
    const served = this.models.get(model);
    if (served) return { kind: 'served', model: served };
    const loading = this.loadingModels.get(model);
    if (loading) return { kind: 'starting', starting: loading };
    const mismatch = this.mismatched.get(model);
    if (mismatch) return { kind: 'mismatched', mismatch };
    const last = this.lastServed.get(model);
    const failure = this.failures.get(model);
    if (failure) return { kind: 'failed', failure, last };
    const idle = this.idle(model);
    if (idle) return { kind: 'starting', starting: idle, last };
    if (this.known.has(model)) return { kind: 'lost', last };
    return { kind: this.healthy ? 'unknown' : 'unreachable', last };
  }

  /** A worker serves the model now, or it is configured (MODELS). */
  isServed(model: string): boolean {
    return this.models.has(model) || this.configuredIds.includes(model);
  }

  served(): ServedModel[] {
    return [...this.models.values()];
  }

  /** Models that were served earlier and have no live worker now (a configured one is idle, not lost). */
  lost(): string[] {
    return [...this.known.keys()].filter(
      (id) => !this.models.has(id) && !this.loadingModels.has(id) && !this.configuredIds.includes(id),
    );
  }

  /** MODELS: the models this gateway serves whether or not a worker runs. */
  configured(): readonly string[] {
    return this.configuredIds;
  }

  /**
   * The model, if it is configured and no worker of it runs, loads, failed or speaks another
   * protocol: scaled to zero. Its estimate is its last measured load time (a new pod's scheduling
   * and start come on top: docs/operations.md).
   */
  idle(model: string): LoadingModel | undefined {
    if (!this.configuredIds.includes(model) || this.models.has(model) || this.loadingModels.has(model))
      return undefined;
    if (this.failures.has(model) || this.mismatched.has(model)) return undefined;
    const ms = this.loadTimes.get(model);
    return {
      id: model,
      idle: true,
      estimatedSeconds: ms === undefined ? UNKNOWN_LOAD_SECONDS : Math.max(1, Math.ceil(ms / 1000)),
    };
  }

  idleAll(): LoadingModel[] {
    return this.configuredIds.flatMap((id) => this.idle(id) ?? []);
  }

  /** The model, if its first worker is still to come: loading, or idle (scaled to zero). */
  starting(model: string): LoadingModel | undefined {
    return this.loadingModels.get(model) ?? this.idle(model);
  }

  loadingAll(): LoadingModel[] {
    return [...this.loadingModels.values()];
  }

  /** Resolves true once the model is served, or false when `deadline` (epoch ms) passes or `signal` aborts first. */
  whenServed(model: string, deadline: number, signal?: AbortSignal): Promise<boolean> {
    if (this.models.has(model)) return Promise.resolve(true);
    if (signal?.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      const done = (served: boolean) => {
        clearTimeout(timer);
        this.listeners.delete(check);
        signal?.removeEventListener('abort', gone);
        resolve(served);
      };
      const check = () => this.models.has(model) && done(true);
      const gone = () => done(false);
      const timer = setTimeout(gone, Math.max(0, deadline - Date.now()));
      signal?.addEventListener('abort', gone, { once: true });
      this.listeners.add(check);
    });
  }

  failed(): LoadFailure[] {
    return [...this.failures.values()];
  }

  /** Most sequences a job for the model should carry: its smallest worker batch. */
  batchSize(model: string): number {
    const workers = this.models.get(model)?.workers ?? [];
    return workers.length ? Math.min(...workers.map((w) => w.batchMaxSize)) : DEFAULT_JOB_SEQUENCES;
  }

  mismatchedAll(): MismatchedModel[] {
    return [...this.mismatched.values()];
  }

  taskOf(model: string): Task | undefined {
    return this.known.get(model);
  }

  /** Fresh: the last refresh succeeded within a few periods. */
  get healthy(): boolean {
    return this.lastError === undefined && Date.now() - this.lastRefreshAt < Math.max(3 * this.refreshMs, 2000);
  }

  async refresh(): Promise<void> {
    try {
      const [workers, failures, loadTimes] = await Promise.all([
        listLiveWorkers(this.redis, this.prefix),
        listLoadFailures(this.redis, this.prefix, this.failureTtlMs),
        listLoadTimes(this.redis, this.prefix),
      ]);
      const byModel = new Map<string, ServedModel>();
      const loading = new Map<string, LoadingModel>();
      const foreign = new Map<string, Set<number>>();
      for (const w of workers) {
        // Its queue is not ours (queueNameFor names the protocol): it would never see our jobs.
        if (w.protocol !== PROTOCOL) {
          foreign.set(w.model, (foreign.get(w.model) ?? new Set<number>()).add(w.protocol));
          this.reportMismatch(w);
          continue;
        }
        // Finishing what it holds, serving nothing new.
        if (w.state === 'draining') continue;
        if (w.state === 'loading' || !w.task) {
          const left = secondsToReady(w, loadTimes.get(w.model));
          const entry = loading.get(w.model);
          if (!entry || left < entry.estimatedSeconds) {
            const download = w.download && w.download.doneAt === undefined ? w.download : undefined;
            loading.set(w.model, { id: w.model, estimatedSeconds: left, ...(download ? { download } : {}) });
          }
          continue;
        }
        const entry = byModel.get(w.model) ?? {
          id: w.model,
          task: w.task,
          tasks: w.tasks ?? [w.task],
          labels: w.labels,
          scoreFunction: w.scoreFunction,
          maxLength: w.maxTokens,
          workers: [],
          weights: {},
        };
        entry.workers.push(w);
        byModel.set(w.model, entry);
      }
      for (const m of byModel.values()) m.weights = agreedWeights(m.workers);
      for (const id of byModel.keys()) loading.delete(id);
      for (const m of byModel.values()) {
        this.known.set(m.id, m.task);
        this.lastServed.set(m.id, m);
      }
      this.models = byModel;
      this.loadingModels = loading;
      this.loadTimes = loadTimes;
      this.mismatched = new Map(
        [...foreign]
          .filter(([id]) => !byModel.has(id) && !loading.has(id))
          .map(([id, protocols]) => [id, mismatchOf(id, [...protocols])]),
      );
      this.failures = new Map(
        failures
          .filter((f) => !byModel.has(f.model) && !loading.has(f.model) && !this.mismatched.has(f.model))
          .map((f) => [f.model, f]),
      );
      for (const listener of [...this.listeners]) listener();
      if (this.lastError) this.logger.info('registry refresh recovered');
      this.lastError = undefined;
      this.lastRefreshAt = Date.now();
    } catch (err) {
      if (!this.lastError)
        this.logger.warn({ err: String(err) }, `registry refresh failed: ${describeRedisFailure(err)}`);
      this.lastError = err instanceof Error ? err.message : String(err);
    }
  }

  private reportMismatch(worker: WorkerInfo): void {
    if (this.reportedMismatches.has(worker.id)) return;
    this.reportedMismatches.add(worker.id);
    this.logger.warn(
      { worker: worker.id, model: worker.model, protocol: worker.protocol, ours: PROTOCOL },
      mismatchOf(worker.model, [worker.protocol]).reason,
    );
  }
}

/** A loading worker's seconds to ready: the rest of its download at its measured rate, then its load. */
function secondsToReady(w: WorkerInfo, knownLoadMs: number | undefined): number {
  const now = Date.now();
  const d = w.download;
  if (d && d.doneAt === undefined) {
    const rest = Math.max(0, d.totalBytes - d.bytes);
    const downloadSeconds = rest === 0 ? 0 : d.bytesPerSecond > 0 ? rest / d.bytesPerSecond : UNKNOWN_LOAD_SECONDS;
    return Math.max(1, Math.ceil(downloadSeconds + (knownLoadMs ?? UNKNOWN_LOAD_SECONDS * 1000) / 1000));
  }
  if (knownLoadMs === undefined) return UNKNOWN_LOAD_SECONDS;
  // Loading began when the download ended, if there was one.
  return Math.max(1, Math.ceil((knownLoadMs - (now - (d?.doneAt ?? w.startedAt))) / 1000));
}

/** The revision and weights hash every worker announces; a field they differ on is left out. */
function agreedWeights(workers: WorkerInfo[]): ModelWeights {
  const one = (values: Array<string | undefined>) => (new Set(values).size === 1 ? values[0] : undefined);
  const revision = one(workers.map((w) => w.revision));
  const sha256 = one(workers.map((w) => w.weightsSha256));
  const file = one(workers.map((w) => w.weightsFile));
  return { ...(revision ? { revision } : {}), ...(sha256 ? { sha256 } : {}), ...(file ? { file } : {}) };
}

function mismatchOf(model: string, protocols: number[]): MismatchedModel {
  const theirs = protocols.join(', ');
  return {
    id: model,
    protocols,
    reason: `model ${model} is served only by workers of wire protocol ${theirs}; this gateway speaks protocol ${PROTOCOL} and sends them no work (run gateways and workers of one release)`,
  };
}
