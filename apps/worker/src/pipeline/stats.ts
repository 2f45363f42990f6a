import { emptyInferenceStats, noDuration, type Duration, type InferenceStats } from '@tserve/contract';

/** Milliseconds as whole nanoseconds, the unit Triton's statistics count in. */
const ns = (ms: number) => Math.round(ms * 1e6);

const add = (d: Duration, ms: number) => {
  d.count++;
  d.ns += ns(ms);
};

/**
 * What this worker has done since it started, as Triton's statistics extension counts it: each
 * request's outcome, wait and phases, and each model call by its batch size. It rides on the
 * heartbeat; the gateway sums the model's workers (GET /v2/models/<id>/stats).
 */
export class InferenceStatistics {
  private readonly stats: InferenceStats = emptyInferenceStats();

  /** A request answered: `totalMs` from enqueue to its answer, and the time of each phase it went through. */
  succeeded(
    at: number,
    totalMs: number,
    phases: { queueMs: number; inputMs: number; modelMs: number; outputMs: number; inputs: number },
  ): void {
    add(this.stats.success, totalMs);
    add(this.stats.queue, phases.queueMs);
    add(this.stats.computeInput, phases.inputMs);
    add(this.stats.computeInfer, phases.modelMs);
    add(this.stats.computeOutput, phases.outputMs);
    this.stats.inferenceCount += phases.inputs;
    this.stats.lastInference = at;
  }

  /** A request refused or failed: `totalMs` from enqueue to its failure. */
  failed(totalMs: number): void {
    add(this.stats.fail, totalMs);
  }

  /** One model call of `size` sequences: tokenizing its sequences, the model's own time, and decoding its rows. */
  executed(size: number, inputMs: number, modelMs: number, outputMs: number): void {
    this.stats.executionCount++;
    const batch = (this.stats.batches[size] ??= {
      computeInput: noDuration(),
      computeInfer: noDuration(),
      computeOutput: noDuration(),
    });
    add(batch.computeInput, inputMs);
    add(batch.computeInfer, modelMs);
    add(batch.computeOutput, outputMs);
  }

  snapshot(): InferenceStats {
    return structuredClone(this.stats);
  }
}
