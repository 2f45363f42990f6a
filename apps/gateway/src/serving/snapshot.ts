import type { ModelDownload, Task, WorkerInfo } from '@tserve/contract';
import type { ModelRegistry } from './model-registry.js';
import type { ModelWeights } from './served-models.js';
import type { QueueDepth } from '../admission/overload.js';
import type { BreakerState, RedisBreaker } from '../admission/breaker.js';

/**
 * Where a model stands: served by live workers; loading (announced by workers still loading it);
 * failed (its worker could not load it, and none serves it since); lost (served earlier, no live
 * worker now); mismatched (its only workers speak another wire protocol); idle (configured, MODELS,
 * and no worker at all: scaled to zero, which is no fault).
 */
type ModelState = 'served' | 'loading' | 'failed' | 'lost' | 'mismatched' | 'idle';

export interface ModelReport {
  id: string;
  state: ModelState;
  /** The model's own task, if it has been served (now or earlier). */
  task?: Task;
  /** Its live workers; none unless served. */
  workers: WorkerInfo[];
  /** Requests accepted and not yet answered, over all gateways; 0 unless served, loading or idle. */
  depth: number;
  /** Requests this gateway holds, not yet sent to Redis (it sends a model's next job once a worker took the last). */
  held: number;
  /** Loading: seconds until its first worker is likely ready; idle: its last measured load time. */
  estimatedSeconds?: number;
  /** Loading: the download of that worker, while it downloads the model's files. */
  download?: ModelDownload;
  /** Served: which weights its workers loaded, where they agree. */
  weights?: ModelWeights;
  /** Failed, or mismatched: why no worker serves it. */
  error?: string;
}

export interface GatewaySnapshot {
  /** The registry's last refresh from Redis succeeded recently. */
  redisHealthy: boolean;
  /** Why the last refresh failed, if it did. */
  redisError?: string;
  breaker: BreakerState;
  /** What the breaker's last failure said of Redis, while it is not closed. */
  breakerCause?: string;
  /** Every model the gateway knows of, once each: served, then lost, failed, loading, mismatched, idle. */
  models: ModelReport[];
}

/** What `/ready`, `/metrics`, `/v2/health/ready` and the dashboard report, taken from memory at once. */
export type Snapshot = () => GatewaySnapshot;

export function createSnapshot(
  registry: ModelRegistry,
  depth: QueueDepth,
  breaker: RedisBreaker,
  /** Requests each model's lane holds back, waiting for its last job to be taken (the transport). */
  lanes: { held(): Map<string, number> },
): Snapshot {
  return () => {
    const holding = lanes.held();
    const served: ModelReport[] = registry.served().map((m) => ({
      id: m.id,
      state: 'served',
      task: m.task,
      workers: m.workers,
      depth: depth.of(m.id),
      held: holding.get(m.id) ?? 0,
      weights: m.weights,
    }));
    // A model that was served and then failed to load again is reported as failed: the more telling of the two.
    const failed: ModelReport[] = registry.failed().map((f) => ({
      id: f.model,
      state: 'failed',
      task: registry.taskOf(f.model),
      workers: [],
      depth: 0,
      held: 0,
      error: f.reason,
    }));
    const failedIds = new Set(failed.map((m) => m.id));
    const lost: ModelReport[] = registry
      .lost()
      .filter((id) => !failedIds.has(id))
      .map((id) => ({ id, state: 'lost', task: registry.taskOf(id), workers: [], depth: 0, held: 0 }));
    const loading: ModelReport[] = registry.loadingAll().map((m) => ({
      id: m.id,
      state: 'loading',
      task: registry.taskOf(m.id),
      workers: [],
      depth: depth.of(m.id),
      held: 0,
      estimatedSeconds: m.estimatedSeconds,
      download: m.download,
    }));
    const idle: ModelReport[] = registry.idleAll().map((m) => ({
      id: m.id,
      state: 'idle',
      task: registry.taskOf(m.id),
      workers: [],
      depth: depth.of(m.id),
      held: 0,
      estimatedSeconds: m.estimatedSeconds,
    }));
    const mismatched: ModelReport[] = registry.mismatchedAll().map((m) => ({
      id: m.id,
      state: 'mismatched',
      task: registry.taskOf(m.id),
      workers: [],
      depth: 0,
      held: 0,
      error: m.reason,
    }));
    return {
      redisHealthy: registry.healthy,
      redisError: registry.lastError,
      breaker: breaker.state(),
      breakerCause: breaker.cause(),
      models: [...served, ...lost, ...failed, ...loading, ...mismatched, ...idle],
    };
  };
}
