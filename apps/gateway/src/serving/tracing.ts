import type { RequestHandler } from 'express';
import type { QueuedRequest, ReadRequestOutcome } from '@tserve/contract';
import { contextKey, type TraceSpan, type Tracing } from '@tserve/telemetry';

/** What a request's spans share: the span that ends when its answer is written. */
interface RequestSpans {
  answer?: TraceSpan;
}
const REQUEST_SPANS = contextKey('tserve.request');

/** The span of one request's trip through the queue and a worker. */
export interface TripSpan {
  /** The outcome arrived (or the trip failed, with `error`). */
  end(outcome?: ReadRequestOutcome, error?: unknown): void;
}

/**
 * The gateway's spans of a request, made only where tracing is on (the service holds this as
 * undefined otherwise): the server span of the HTTP request, continuing a client's `traceparent`;
 * admission; the trip through the queue, whose context travels in the job to the worker; and the
 * answer, from the outcome's arrival to the last byte written. docs/tracing.md names them.
 */
export class GatewayTracing {
  constructor(private readonly tracing: Tracing) {}

  /**
   * The server span of every POST (the routes that run a model), made current for the rest of the
   * request: its body's stream is bound too, as the routes run in that stream's callbacks.
   */
  readonly middleware: RequestHandler = (req, res, next) => {
    if (req.method !== 'POST') return next();
    const { tracing } = this;
    const span = tracing.span(`POST ${req.path}`, {
      parent: tracing.extract(req.headers),
      kind: 'server',
      attributes: { 'http.request.method': req.method, 'url.path': req.path },
    });
    const shared: RequestSpans = {};
    const ctx = span.context.setValue(REQUEST_SPANS, shared);
    res.once('close', () => {
      shared.answer?.end();
      const route = (req.route as { path?: string } | undefined)?.path;
      if (route !== undefined) span.rename(`POST ${route}`);
      const requestId = res.getHeader('x-request-id');
      const cache = res.getHeader('x-cache');
      span.set({
        ...(typeof cache === 'string' ? { 'tserve.cache': cache } : {}),
        'http.response.status_code': res.statusCode,
        ...(route === undefined ? {} : { 'http.route': route }),
        ...(typeof requestId === 'string' ? { 'tserve.request_id': requestId } : {}),
      });
      if (res.statusCode >= 500 || !res.writableFinished)
        span.fail(res.writableFinished ? `status ${res.statusCode}` : 'the client closed the connection');
      span.end();
    });
    tracing.bind(ctx, req);
    tracing.bind(ctx, res);
    tracing.run(ctx, next);
  };

  /**
   * The server span of a gRPC call, continuing the `traceparent` of its metadata, made current
   * while `run` runs; its status is the call's gRPC status (`statusOf` its outcome).
   */
  readonly grpcCall = async <T>(
    method: string,
    metadata: (name: string) => string | undefined,
    run: () => Promise<T>,
  ): Promise<T> => {
    const { tracing } = this;
    const span = tracing.span(method, {
      parent: tracing.extract({ traceparent: metadata('traceparent'), tracestate: metadata('tracestate') }),
      kind: 'server',
      attributes: { 'rpc.system': 'grpc', 'rpc.method': method },
    });
    const shared: RequestSpans = {};
    try {
      return await tracing.run(span.context.setValue(REQUEST_SPANS, shared), run);
    } catch (err) {
      span.fail(err instanceof Error ? err.message : String(err));
      throw err;
    } finally {
      shared.answer?.end();
      span.end();
    }
  };

  /** Admission of a request whose size is known; ended by the caller. */
  admission(model: string): TraceSpan {
    return this.tracing.span('tserve.admission', {
      parent: this.tracing.active(),
      attributes: { 'tserve.model': model },
    });
  }

  /** The request's trip to a worker and back; puts its trace context in the request for the worker. */
  trip(model: string, request: QueuedRequest): TripSpan {
    const span = this.tracing.span('tserve.queue', {
      parent: this.tracing.active(),
      kind: 'producer',
      attributes: { 'tserve.model': model, 'tserve.request_id': request.id, 'tserve.inputs': request.inputs.length },
    });
    request.trace = this.tracing.inject(span.context);
    return {
      end(outcome, error) {
        if (outcome?.ok) {
          span.set({
            'tserve.queue_ms': outcome.timing.queue_ms,
            'tserve.inference_ms': outcome.timing.inference_ms,
            'tserve.batch.size': outcome.timing.batch_size,
          });
        } else {
          span.fail(outcome && !outcome.ok ? outcome.error.error : String(error));
        }
        span.end();
      },
    };
  }

  /** The outcome is in: what is left is shaping and writing the answer, ended with the server span. */
  answering(): void {
    const ctx = this.tracing.active();
    const shared = ctx.getValue(REQUEST_SPANS) as RequestSpans | undefined;
    if (shared && !shared.answer) shared.answer = this.tracing.span('tserve.answer', { parent: ctx });
  }

  shutdown(): Promise<void> {
    return this.tracing.shutdown();
  }
}
