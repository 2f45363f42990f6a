import { ApiError, type QueuedRequest, type RequestOutcome } from '@tserve/contract';
import type { BatchReport, Pending } from './prepared-batch.js';
import type { InferenceStatistics } from './stats.js';

/** Where the runner sends each request's outcome, once per request (transport/settling.ts gathers them by job). */
export interface OutcomeSink {
  record(request: QueuedRequest, outcome: RequestOutcome): void;
}

/**
 * Each request's outcome, sent to the sink and counted in the statistics: its answer, its failure,
 * or its finish unrun where its deadline passed or its client left.
 */
export class RequestOutcomes {
  constructor(
    private readonly sink: OutcomeSink,
    private readonly stats: InferenceStatistics,
    /** Requests whose clients have gone away (the cancellations the gateways publish). */
    private readonly abandoned: { has(requestId: string): boolean },
    private readonly now: () => number,
  ) {}

  /** Finishes, unrun, a request past its deadline or whose client left; true if it did. */
  dropIfDead(request: QueuedRequest, report: BatchReport): boolean {
    if (request.deadline <= this.now()) {
      report.expired++;
      this.fail(request, new ApiError('timeout', 'the request deadline passed before the model ran it'));
      return true;
    }
    if (this.abandoned.has(request.id)) {
      report.abandoned++;
      this.fail(
        request,
        new ApiError('cancelled', 'the client closed the connection before the model ran the request'),
      );
      return true;
    }
    return false;
  }

  /** The answer of a request that needed no model call: its inputs' time is all it cost. */
  answered(request: QueuedRequest, outputs: unknown[], inputMs: number): void {
    const queueMs = Math.max(0, this.now() - request.enqueuedAt);
    this.stats.succeeded(this.now(), queueMs, {
      queueMs,
      inputMs,
      inferMs: 0,
      outputMs: 0,
      inputs: request.inputs.length,
    });
    this.sink.record(request, {
      id: request.id,
      ok: true,
      outputs,
      warnings: [],
      timing: { queue_ms: queueMs, inference_ms: 0, batch_size: 0 },
    });
  }

  /** The answer of a request whose every sequence ran: `outputs`, one per input. */
  succeeded(pending: Pending, outputs: unknown[]): void {
    const { request } = pending;
    this.sink.record(request, {
      id: request.id,
      ok: true,
      outputs,
      warnings: pending.warnings,
      timing: {
        queue_ms: pending.queueMs ?? 0,
        inference_ms: round(pending.inferenceMs),
        batch_size: pending.batchSize,
      },
      tokens: pending.tokens,
    });
    const { queueMs = 0, inputMs, inferMs, outputMs } = pending;
    this.stats.succeeded(this.now(), Math.max(0, this.now() - request.enqueuedAt), {
      queueMs,
      inputMs,
      inferMs,
      outputMs,
      inputs: request.inputs.length,
    });
  }

  fail(request: QueuedRequest, error: ApiError): void {
    this.sink.record(request, { id: request.id, ok: false, error: error.toBody() });
    this.stats.failed(Math.max(0, this.now() - request.enqueuedAt));
  }
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;
