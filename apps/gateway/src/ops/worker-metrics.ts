import { Counter, Gauge, type Registry } from 'prom-client';
import type { WorkerInfo } from '@tserve/contract';
import type { Snapshot } from '../serving/snapshot.js';

/** The workers the snapshot reports: which serve each model, and what each one's heartbeat says. */
export function workerMetrics(registers: Registry[], snapshot: Snapshot): void {
  servingSeries(registers, snapshot);
  heartbeatSeries(registers, snapshot);
}

/** Which workers serve each model, on what device and weights, and how far a loading one has downloaded. */
function servingSeries(registers: Registry[], snapshot: Snapshot): void {
  new Gauge({
    name: 'tserve_model_download_ratio',
    help: "Share (0 to 1) of a loading model's files downloaded by the worker likely ready first, while it downloads them",
    labelNames: ['model'] as const,
    registers,
    collect() {
      this.reset();
      for (const model of snapshot().models)
        if (model.download) this.set({ model: model.id }, model.download.percent / 100);
    },
  });
  new Gauge({
    name: 'tserve_live_workers',
    help: 'Workers announcing each model; 0 for a model that lost all its workers or that its worker could not load',
    labelNames: ['model'] as const,
    registers,
    collect() {
      this.reset();
      for (const model of snapshot().models)
        if (model.state !== 'loading') this.set({ model: model.id }, model.workers.length);
    },
  });
  new Gauge({
    name: 'tserve_workers',
    help: 'Live workers by model, device (cpu, webgpu, cuda) and dtype',
    labelNames: ['model', 'device', 'dtype'] as const,
    registers,
    collect() {
      this.reset();
      for (const model of snapshot().models) {
        for (const w of model.workers) this.inc({ model: model.id, device: w.device, dtype: w.dtype });
      }
    },
  });
  new Gauge({
    name: 'tserve_model_weights',
    help: 'Live workers by model, hub revision (commit; "local" for a MODEL_DIR folder) and sha256 of the weights file they loaded',
    labelNames: ['model', 'revision', 'sha256'] as const,
    registers,
    collect() {
      this.reset();
      for (const model of snapshot().models) {
        for (const w of model.workers) {
          if (w.weightsSha256) this.inc({ model: model.id, revision: w.revision ?? 'local', sha256: w.weightsSha256 });
        }
      }
    },
  });
}

/** Each live worker's figures as of its last heartbeat, by model and worker. */
function heartbeatSeries(registers: Registry[], snapshot: Snapshot): void {
  new Counter({
    name: 'tserve_model_busy_seconds_total',
    help: "Seconds each live worker's model has spent in calls since the worker started, as of its last heartbeat; its rate below 1 means the model waited for work",
    labelNames: ['model', 'worker'] as const,
    registers,
    collect() {
      this.reset();
      for (const model of snapshot().models) {
        for (const w of model.workers)
          if (w.modelBusyMs !== undefined) this.inc({ model: model.id, worker: w.id }, w.modelBusyMs / 1000);
      }
    },
  });
  // Each worker's memory, from its heartbeat: what to set its container's limit against (docs/memory.md).
  const workerGauge = (name: string, help: string, read: (w: WorkerInfo) => number | undefined) =>
    new Gauge({
      name,
      help,
      labelNames: ['model', 'worker'] as const,
      registers,
      collect() {
        this.reset();
        for (const model of snapshot().models) {
          for (const w of model.workers) {
            const v = read(w);
            if (v !== undefined) this.set({ model: model.id, worker: w.id }, v);
          }
        }
      },
    });
  workerGauge(
    'tserve_worker_resident_memory_bytes',
    "Each live worker process's resident memory (RSS), as of its last heartbeat",
    (w) => w.rssBytes,
  );
  workerGauge(
    'tserve_worker_peak_resident_memory_bytes',
    'The most resident memory each live worker process has held since it started (VmHWM), as of its last heartbeat',
    (w) => w.peakRssBytes,
  );
  workerGauge(
    'tserve_worker_memory_budget_bytes',
    "Each live worker's WORKER_MEMORY_MB, in bytes, where set",
    (w) => w.memoryBudgetBytes,
  );
  workerGauge(
    'tserve_worker_largest_call_tokens',
    'Padded tokens (rows x longest) of the largest model call each live worker has run since it started: its tensors, and its memory, grew with it',
    (w) => w.largestCallTokens,
  );
}
