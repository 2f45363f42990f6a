import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { PROTOCOL, type Task, type WorkerInfo } from '@tserve/contract';
import {
  describeRedisFailure,
  listLiveWorkers,
  listLoadFailures,
  listLoadTimes,
  type LoadFailure,
} from '@tserve/queue';
import {
  mismatchOf,
  readHeartbeats,
  UNKNOWN_LOAD_SECONDS,
  type LoadingModel,
  type MismatchedModel,
  type ModelStatus,
  type ServedModel,
} from './served-models.js';

/** What the registry reads, and how often. */
export interface RegistryParts {
  redis: Redis;
  /** QUEUE_PREFIX: where the workers' heartbeats and load failures are. */
  prefix: string;
  /** REGISTRY_REFRESH_MS. */
  refreshMs: number;
  /** LOAD_FAILURE_TTL_MS: how long a model whose worker failed to load it is reported as failed. */
  failureTtlMs: number;
  logger: Logger;
  /** MODELS: served even with no worker (scaled to zero). */
  configured: readonly string[];
}

/**
 * What the workers say they serve (live, loading, failed to load), read from their heartbeats in
 * Redis in the background so that the request path reads it from memory: no Redis round trip per
 * request for routing; and the models the gateway is configured to serve (MODELS), which may have no
 * worker at all (scaled to zero). How loaded a model is, is admission's business (`overload.ts`).
 */
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
  /** Told after each successful refresh (admission's bounds: which models' queues are bounded). */
  private readonly watchers: Array<(registry: ModelRegistry) => void> = [];
  private timer?: NodeJS.Timeout;
  lastError?: string;
  lastRefreshAt = 0;

  constructor(private readonly parts: RegistryParts) {}

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.parts.refreshMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Tells `watcher` of the registry now, and after each refresh. */
  watch(watcher: (registry: ModelRegistry) => void): void {
    this.watchers.push(watcher);
    watcher(this);
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
    // Served before, by this gateway's count or by the load time some worker recorded: a gateway
    // restarted while the model's workers restart too answers as one that stayed up, "retry".
    if (this.known.has(model) || this.loadTimes.has(model)) return { kind: 'lost', last };
    return { kind: this.healthy ? 'unknown' : 'unreachable', last };
  }

  served(): ServedModel[] {
    return [...this.models.values()];
  }

  /** The models a worker serves now, then those configured (MODELS): those whose queues admission bounds. */
  servedOrConfigured(): string[] {
    return [...new Set([...this.models.keys(), ...this.parts.configured])];
  }

  /** Models that were served earlier and have no live worker now (a configured one is idle, not lost). */
  lost(): string[] {
    return [...this.known.keys()].filter(
      (id) => !this.models.has(id) && !this.loadingModels.has(id) && !this.parts.configured.includes(id),
    );
  }

  /** MODELS: the models this gateway serves whether or not a worker runs. */
  configured(): readonly string[] {
    return this.parts.configured;
  }

  /**
   * The model, if it is configured and no worker of it runs, loads, failed or speaks another
   * protocol: scaled to zero. Its estimate is its last measured load time (a new pod's scheduling
   * and start come on top: docs/operations.md).
   */
  idle(model: string): LoadingModel | undefined {
    if (!this.parts.configured.includes(model) || this.models.has(model) || this.loadingModels.has(model))
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
    return this.parts.configured.flatMap((id) => this.idle(id) ?? []);
  }

  /** The model, if its first worker is still to come: loading, or idle (scaled to zero). */
  starting(model: string): LoadingModel | undefined {
    return this.loadingModels.get(model) ?? this.idle(model);
  }

  loadingAll(): LoadingModel[] {
    return [...this.loadingModels.values()];
  }

  /** Resolves true once the model is served, or false when `deadline` (epoch ms) passes or `signal` aborts first. */
  untilServed(model: string, deadline: number, signal?: AbortSignal): Promise<boolean> {
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

  /** Sequences one model call of each live worker of the model holds, together (0 with none). */
  callSequences(model: string): number {
    return (this.models.get(model)?.workers ?? []).reduce((sum, w) => sum + w.batchMaxSize, 0);
  }

  mismatchedAll(): MismatchedModel[] {
    return [...this.mismatched.values()];
  }

  taskOf(model: string): Task | undefined {
    return this.known.get(model);
  }

  /** Fresh: the last refresh succeeded within a few periods. */
  get healthy(): boolean {
    return this.lastError === undefined && Date.now() - this.lastRefreshAt < Math.max(3 * this.parts.refreshMs, 2000);
  }

  async refresh(): Promise<void> {
    try {
      const [workers, failures, loadTimes] = await Promise.all([
        listLiveWorkers(this.parts.redis, this.parts.prefix),
        listLoadFailures(this.parts.redis, this.parts.prefix, this.parts.failureTtlMs),
        listLoadTimes(this.parts.redis, this.parts.prefix),
      ]);
      const { byModel, loading, foreign } = readHeartbeats(workers, loadTimes);
      for (const w of workers) if (w.protocol !== PROTOCOL) this.reportMismatch(w);
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
      for (const watcher of this.watchers) watcher(this);
      if (this.lastError) this.parts.logger.info('registry refresh recovered');
      this.lastError = undefined;
      this.lastRefreshAt = Date.now();
    } catch (err) {
      if (!this.lastError)
        this.parts.logger.warn({ err: String(err) }, `registry refresh failed: ${describeRedisFailure(err)}`);
      this.lastError = err instanceof Error ? err.message : String(err);
    }
  }

  private reportMismatch(worker: WorkerInfo): void {
    if (this.reportedMismatches.has(worker.id)) return;
    this.reportedMismatches.add(worker.id);
    this.parts.logger.warn(
      { worker: worker.id, model: worker.model, protocol: worker.protocol, ours: PROTOCOL },
      mismatchOf(worker.model, [worker.protocol]).reason,
    );
  }
}
