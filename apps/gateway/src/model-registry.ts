import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { Task, WorkerInfo } from '@tserve/contract';
import { listLiveWorkers, listLoadFailures, type LoadFailure } from '@tserve/queue';
import type { QueueSet } from './queues.js';

export interface ServedModel {
  id: string;
  task: Task;
  workers: WorkerInfo[];
  /** Waiting jobs at the last refresh, plus what this gateway has enqueued since that refresh began. */
  depth: number;
}

/**
 * What the workers say they serve, refreshed from Redis in the background so that the request
 * path reads it from memory: no Redis round trip per request for routing or load shedding.
 */
export class ModelRegistry {
  private models = new Map<string, ServedModel>();
  /** Models that had a live worker at some point; one with none left is reported as down. */
  private readonly known = new Map<string, Task>();
  /** Models whose worker reported it could not load them, and has no live worker since. */
  private failures = new Map<string, LoadFailure>();
  /** Enqueues per model since start; a refresh adds those made while it ran to the depth it read. */
  private readonly enqueued = new Map<string, number>();
  private timer?: NodeJS.Timeout;
  lastError?: string;
  lastRefreshAt = 0;

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly queues: QueueSet,
    private readonly refreshMs: number,
    private readonly failureTtlMs: number,
    private readonly logger: Logger,
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

  served(): ServedModel[] {
    return [...this.models.values()];
  }

  /** Models that were served earlier and have no live worker now. */
  lost(): string[] {
    return [...this.known.keys()].filter((id) => !this.models.has(id));
  }

  failure(model: string): LoadFailure | undefined {
    return this.failures.get(model);
  }

  failed(): LoadFailure[] {
    return [...this.failures.values()];
  }

  taskOf(model: string): Task | undefined {
    return this.known.get(model);
  }

  noteEnqueued(model: string): void {
    this.enqueued.set(model, (this.enqueued.get(model) ?? 0) + 1);
    const served = this.models.get(model);
    if (served) served.depth++;
  }

  /**
   * A job of this gateway left the queue. Without this, an overloaded model would stay refused until
   * the next refresh even after its workers drained it. The next refresh replaces the estimate.
   */
  noteLeft(model: string): void {
    const served = this.models.get(model);
    if (served && served.depth > 0) served.depth--;
  }

  /** Fresh: the last refresh succeeded within a few periods. */
  get healthy(): boolean {
    return this.lastError === undefined && Date.now() - this.lastRefreshAt < Math.max(3 * this.refreshMs, 2000);
  }

  async refresh(): Promise<void> {
    const enqueuedBefore = new Map(this.enqueued);
    try {
      const [workers, failures] = await Promise.all([
        listLiveWorkers(this.redis, this.prefix),
        listLoadFailures(this.redis, this.prefix, this.failureTtlMs),
      ]);
      const byModel = new Map<string, ServedModel>();
      for (const w of workers) {
        const entry = byModel.get(w.model) ?? { id: w.model, task: w.task, workers: [], depth: 0 };
        entry.workers.push(w);
        byModel.set(w.model, entry);
      }
      await Promise.all(
        [...byModel.values()].map(async (m) => {
          const waiting = await this.queues.get(m.id).getWaitingCount();
          // Jobs enqueued while the count was read may or may not be in it: count them, to err on the safe side.
          m.depth = waiting + (this.enqueued.get(m.id) ?? 0) - (enqueuedBefore.get(m.id) ?? 0);
        }),
      );
      for (const m of byModel.values()) this.known.set(m.id, m.task);
      this.models = byModel;
      this.failures = new Map(failures.filter((f) => !byModel.has(f.model)).map((f) => [f.model, f]));
      if (this.lastError) this.logger.info('registry refresh recovered');
      this.lastError = undefined;
      this.lastRefreshAt = Date.now();
    } catch (err) {
      if (!this.lastError) this.logger.warn({ err: String(err) }, 'registry refresh failed');
      this.lastError = err instanceof Error ? err.message : String(err);
    }
  }
}
