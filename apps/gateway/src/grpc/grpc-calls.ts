import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { ApiError, type ErrorType } from '@tserve/contract';

/**
 * One gRPC call as a protocol's handler sees it (`GrpcCall`: metadata, deadline, a signal for the
 * client's going away, a request id), and its end as the client sees it: the handler's answer, or
 * its `ApiError` as the gRPC status that says the same (`STATUS_OF`), anything else an INTERNAL whose
 * details say nothing of the code; one log line and one observation per call.
 */

/** What a handler knows of its call besides the request message. */
export interface GrpcCall {
  /** A fresh id per call, as an HTTP request's: it names the call's jobs and log line. */
  readonly requestId: string;
  /** Aborts when the client cancels, or its deadline passes. */
  readonly signal: AbortSignal;
  /** Milliseconds left until the client's deadline; undefined when it set none. */
  readonly timeoutMs?: number;
  /** A metadata value (as text), by its lower-case name. */
  metadata: (name: string) => string | undefined;
}

/** Messages come as the `.proto` defines them, every field present (proto-loader's defaults). */
type UnaryHandler = (request: unknown, call: GrpcCall) => Promise<object>;
/** Answers a stream of requests; `send` writes one response, in any order. */
type StreamHandler = (
  requests: AsyncIterable<unknown>,
  send: (response: object) => void,
  call: GrpcCall,
) => Promise<void>;

/** Answers a stream of requests with one response. */
type GatherHandler = (requests: AsyncIterable<unknown>, call: GrpcCall) => Promise<object>;

/**
 * One service's handlers by method name, for the service `name` (package.Service) in `protoFile`:
 * one request and one answer (`unary`), a stream each way (`streams`), a stream in and one answer
 * (`gathers`).
 */
export interface GrpcService {
  protoFile: string;
  name: string;
  unary: Record<string, UnaryHandler>;
  streams?: Record<string, StreamHandler>;
  gathers?: Record<string, GatherHandler>;
}

/** Each error type as the gRPC status a client of that protocol expects for it. */
const STATUS_OF: Record<ErrorType, grpc.status> = {
  validation: grpc.status.INVALID_ARGUMENT,
  unauthorized: grpc.status.UNAUTHENTICATED,
  forbidden: grpc.status.PERMISSION_DENIED,
  not_found: grpc.status.NOT_FOUND,
  unsupported_media_type: grpc.status.INVALID_ARGUMENT,
  payload_too_large: grpc.status.RESOURCE_EXHAUSTED,
  rate_limited: grpc.status.RESOURCE_EXHAUSTED,
  inference: grpc.status.INVALID_ARGUMENT,
  internal: grpc.status.INTERNAL,
  overloaded: grpc.status.RESOURCE_EXHAUSTED,
  unavailable: grpc.status.UNAVAILABLE,
  timeout: grpc.status.DEADLINE_EXCEEDED,
  insufficient_storage: grpc.status.RESOURCE_EXHAUSTED,
  cancelled: grpc.status.CANCELLED,
};

/** An error as the status, message and metadata the client gets. */
function statusOf(err: unknown, logger: Logger, method: string): Partial<grpc.StatusObject> {
  if (err instanceof ApiError) {
    const metadata = new grpc.Metadata();
    if (err.retryAfterSeconds !== undefined) metadata.set('retry-after', String(err.retryAfterSeconds));
    metadata.set('error-type', err.type);
    return { code: STATUS_OF[err.type], details: err.message, metadata };
  }
  logger.error(
    { err: err instanceof Error ? { message: err.message, stack: err.stack } : String(err), method },
    'gRPC call failed',
  );
  return { code: grpc.status.INTERNAL, details: 'internal error' };
}

/** What every kind of server call has: its metadata, deadline, and the event of its cancelling. */
type AnyCall = Pick<grpc.ServerUnaryCall<unknown, unknown>, 'metadata' | 'getDeadline'> & {
  once(event: 'cancelled', listener: () => void): unknown;
};

/** A failed call's status: CANCELLED once its client went away (whatever that broke), else its error's. */
function outcomeOf(err: unknown, context: GrpcCall, route: Route): Partial<grpc.StatusObject> {
  if (context.signal.aborted) return { code: grpc.status.CANCELLED, details: 'the client cancelled the call' };
  return statusOf(err, route.logger, route.method);
}

/** A call's context for its handler, and `answered`, to say once its answer is on its way. */
function callOf(call: AnyCall): { context: GrpcCall; answered: () => void } {
  const controller = new AbortController();
  let answered = false;
  // grpc-js tells 'cancelled' after every call, answered ones too: aborting those cost each call an
  // AbortError's stack and its listeners' work (bench/HISTORY.md). Only an unanswered call was cancelled.
  call.once('cancelled', () => {
    if (!answered) controller.abort();
  });
  const deadline = call.getDeadline();
  const at = deadline instanceof Date ? deadline.getTime() : deadline;
  const context: GrpcCall = {
    requestId: randomUUID(),
    signal: controller.signal,
    timeoutMs: Number.isFinite(at) ? Math.max(1, Math.floor(at - Date.now())) : undefined,
    metadata: (name) => {
      const [value] = call.metadata.get(name);
      return value === undefined ? undefined : String(value);
    },
  };
  return { context, answered: () => (answered = true) };
}

/**
 * Logs one line per call, as the HTTP request log does, and tells the metrics: called once the
 * answer is handed to grpc-js, as HTTP's is on the response's close, so that no client waits for it.
 */
function finished({ method, logger, observed }: Route, requestId: string, ms: number, code: grpc.status): void {
  const level = code === grpc.status.INTERNAL ? 'error' : code === grpc.status.OK ? 'info' : 'warn';
  logger[level](
    { reqId: requestId, method, grpc_status: grpc.status[code], duration_ms: Number(ms.toFixed(3)) },
    code === grpc.status.OK ? 'request completed' : 'request failed',
  );
  observed?.(method, grpc.status[code], ms / 1000);
}

/** One method as the server runs it: its name, the log, and what runs each call's handler (its span). */
export interface Route {
  method: string;
  logger: Logger;
  within: <T>(context: GrpcCall, run: () => Promise<T>) => Promise<T>;
  /** Told of each call as it ends: its method, status name and seconds (the metrics). */
  observed?: (method: string, status: string, seconds: number) => void;
}

export function unary(handler: UnaryHandler, route: Route): grpc.handleUnaryCall<unknown, unknown> {
  return (call, callback) => {
    const made = callOf(call);
    answer(() => route.within(made.context, () => handler(call.request, made.context)), made, callback, route);
  };
}

export function gather(handler: GatherHandler, route: Route): grpc.handleClientStreamingCall<unknown, unknown> {
  return (call, callback) => {
    const made = callOf(call);
    // Read without destroying the call once the client half-closes: the answer still has to go out.
    const requests = call.iterator({ destroyOnReturn: false });
    answer(() => route.within(made.context, () => handler(requests, made.context)), made, callback, route);
  };
}

/** Sends a handler's one answer, or its error as a status, and logs the call. */
function answer(
  handle: () => Promise<object>,
  { context, answered }: ReturnType<typeof callOf>,
  callback: grpc.sendUnaryData<unknown>,
  route: Route,
): void {
  const startedAt = performance.now();
  handle().then(
    (response) => {
      answered();
      const ms = performance.now() - startedAt;
      callback(null, response);
      finished(route, context.requestId, ms, grpc.status.OK);
    },
    (err) => {
      const status = outcomeOf(err, context, route);
      answered();
      const ms = performance.now() - startedAt;
      callback(status);
      finished(route, context.requestId, ms, status.code!);
    },
  );
}

export function stream(handler: StreamHandler, route: Route): grpc.handleBidiStreamingCall<unknown, unknown> {
  return (call) => {
    const startedAt = performance.now();
    const { context, answered } = callOf(call);
    const send = (response: object) => {
      if (!context.signal.aborted) call.write(response);
    };
    // Read without destroying the call once the client half-closes: the answers still have to go out.
    const requests = call.iterator({ destroyOnReturn: false });
    route
      .within(context, () => handler(requests, send, context))
      .then(
        () => {
          answered();
          const ms = performance.now() - startedAt;
          call.end();
          finished(route, context.requestId, ms, grpc.status.OK);
        },
        (err) => {
          const status = outcomeOf(err, context, route);
          const cancelled = context.signal.aborted;
          answered();
          const ms = performance.now() - startedAt;
          if (!cancelled) call.emit('error', status);
          finished(route, context.requestId, ms, status.code!);
        },
      );
  };
}
