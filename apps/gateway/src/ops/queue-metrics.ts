import { Counter, Gauge, type Registry } from 'prom-client';
import type { Snapshot } from '../serving/snapshot.js';
import type { Transport } from '../transport/index.js';

/** What the transport counts of each model's queue: jobs sent, requests abandoned and skipped. */
export type QueueCounts = Pick<Transport, 'abandoned' | 'skipped' | 'enqueued'>;

/** Each model's queue: the requests in it and held for it, the jobs sent to it and the requests dropped from it. */
export function queueMetrics(registers: Registry[], snapshot: Snapshot, transport: QueueCounts): void {
  new Gauge({
    name: 'tserve_queue_depth',
    help: 'Requests accepted and not yet answered for each served model, and each configured one (MODELS) scaled to zero, over all gateways (this one exactly, the others as of the last registry refresh)',
    labelNames: ['model'] as const,
    registers,
    collect() {
      // Reset first: a model no longer served must drop out, not keep its last value.
      this.reset();
      for (const model of snapshot().models)
        if (model.state === 'served' || model.state === 'idle') this.set({ model: model.id }, model.depth);
    },
  });
  new Gauge({
    name: 'tserve_requests_held',
    help: "Requests this gateway holds for each served model, not yet sent to the model's queue: it sends a model's next job once a worker has taken its last",
    labelNames: ['model'] as const,
    registers,
    collect() {
      this.reset();
      for (const model of snapshot().models) if (model.state === 'served') this.set({ model: model.id }, model.held);
    },
  });
  new Counter({
    name: 'tserve_jobs_enqueued_total',
    help: "BullMQ jobs this gateway added to each model's queue; each carries the requests that arrived while the model's last job was on its way",
    labelNames: ['model'] as const,
    registers,
    collect() {
      this.reset();
      for (const [model, n] of transport.enqueued) this.inc({ model }, n);
    },
  });
  new Counter({
    name: 'tserve_requests_abandoned_total',
    help: 'Requests whose client left before the answer, by model and where they were dropped: gateway (never enqueued) or queue (workers told to skip them)',
    labelNames: ['model', 'at'] as const,
    registers,
    collect() {
      this.reset();
      for (const [model, counts] of transport.abandoned)
        for (const [at, n] of Object.entries(counts)) this.inc({ model, at }, n);
    },
  });
  new Counter({
    name: 'tserve_requests_skipped_total',
    help: 'Abandoned requests a worker skipped unrun (the rest had already started when the worker heard)',
    labelNames: ['model'] as const,
    registers,
    collect() {
      this.reset();
      for (const [model, n] of transport.skipped) this.inc({ model }, n);
    },
  });
}
