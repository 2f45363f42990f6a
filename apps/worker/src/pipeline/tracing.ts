import type { QueuedRequest, RequestOutcome } from '@tserve/contract';
import type { TraceContext, TraceSpan, Tracing } from '@tserve/telemetry';
import type { OutcomeSink } from './jobs.js';
import type { ModelCall, ModelCallObserver } from './prepared-batch.js';

/** A traced request's spans open on this worker. */
interface Open {
  parent: TraceContext;
  inference: TraceSpan;
  /** Epoch ms when its last model call's forward pass ended: its post-processing starts there. */
  lastModelEnd: number;
}

const now = () => performance.timeOrigin + performance.now();

/**
 * The worker's spans, made only where tracing is on and only for requests that carry a trace
 * context (`QueuedRequest.trace`): each request's queue wait, its inference (the model calls that
 * ran it) and post-processing, in its own trace; and one span per model call, in the trace of its
 * first request, linked to every request it ran (those of a coalesced job, and of other jobs).
 * docs/tracing.md names them and their attributes.
 */
export class WorkerTracing implements ModelCallObserver {
  private readonly open = new Map<string, Open>();

  constructor(private readonly tracing: Tracing) {}

  ran(call: ModelCall): void {
    const traced = call.requests.filter((r) => r.trace !== undefined);
    if (traced.length === 0) return;
    const end = now();
    const start = end - call.inferenceMs;
    const modelEnd = start + call.modelMs;
    const attributes = {
      'tserve.batch.size': call.sequences,
      'tserve.batch.requests': call.requests.length,
      'tserve.batch.padded_tokens': call.paddedTokens,
      'tserve.batch.model_ms': call.modelMs,
    };
    const contexts = traced.map((request) => this.opened(request, start).parent);
    this.tracing.span('tserve.batch', { parent: contexts[0], startTime: start, attributes, links: contexts }).end(end);
    for (const request of traced) {
      const open = this.open.get(request.id)!;
      open.lastModelEnd = modelEnd;
      open.inference.set(attributes);
    }
  }

  /** Ends a request's spans as its outcome is handed on. */
  sink(outcomes: OutcomeSink): OutcomeSink {
    return {
      accept: (request, outcome) => {
        if (request.trace !== undefined) this.finished(request, outcome);
        outcomes.accept(request, outcome);
      },
    };
  }

  private opened(request: QueuedRequest, start: number): Open {
    let open = this.open.get(request.id);
    if (!open) {
      const parent = this.tracing.extract(request.trace!);
      this.tracing.span('tserve.queue_wait', { parent, startTime: request.enqueuedAt }).end(start);
      const inference = this.tracing.span('tserve.inference', {
        parent,
        kind: 'consumer',
        startTime: start,
        attributes: { 'tserve.request_id': request.id },
      });
      open = { parent, inference, lastModelEnd: start };
      this.open.set(request.id, open);
    }
    return open;
  }

  private finished(request: QueuedRequest, outcome: RequestOutcome): void {
    const end = now();
    const open = this.open.get(request.id);
    if (!open) {
      // Answered without a model call: tokenization alone, or refused (expired, invalid, abandoned).
      const span = this.tracing.span('tserve.queue_wait', {
        parent: this.tracing.extract(request.trace!),
        startTime: request.enqueuedAt,
      });
      if (!outcome.ok) span.fail(outcome.error.error);
      span.end(end);
      return;
    }
    this.open.delete(request.id);
    this.tracing.span('tserve.postprocess', { parent: open.inference.context, startTime: open.lastModelEnd }).end(end);
    if (!outcome.ok) open.inference.fail(outcome.error.error);
    open.inference.end(end);
  }
}
