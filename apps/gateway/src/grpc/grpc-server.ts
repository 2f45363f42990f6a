import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { HealthImplementation, type ServingStatus } from 'grpc-health-check';
import { ReflectionService } from '@grpc/reflection';
import type { Logger } from 'pino';
import { ApiError, type ErrorType } from '@tserve/contract';

/**
 * The gateway's gRPC server (GRPC_PORT): the one module on `@grpc/grpc-js`. It loads the services'
 * `.proto` files from the contract package, serves `grpc.health.v1.Health` and server reflection
 * beside them, and gives each protocol's handlers a call in plain terms (`GrpcCall`): metadata,
 * deadline, a signal for the client's going away, and a request id. Handlers throw `ApiError`s;
 * each becomes the gRPC status that says the same (`STATUS_OF`), and anything else an INTERNAL
 * whose details say nothing of the code.
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

/** Where the contract package keeps the `.proto` files, in the checkout and in the release alike. */
function protoDir(): string {
  const require = createRequire(import.meta.url);
  return path.join(path.dirname(require.resolve('@tserve/contract/package.json')), 'proto');
}

/** Messages as plain objects with the `.proto`'s own field names; 64-bit numbers as numbers. */
const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
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

export interface GrpcServerOptions {
  port: number;
  host: string;
  /** The largest request message taken, as HTTP's MAX_BODY_BYTES. */
  maxMessageBytes: number;
  logger: Logger;
  /** Whether the server can take inference requests now (/ready's answer), for the health service. */
  ready: () => boolean;
  /** How often the health service asks `ready` (the registry's refresh: it changes no faster). */
  readyRefreshMs: number;
  /** Runs each call's handler, where tracing is on: in the server span it makes (serving/tracing.ts). */
  traced?: <T>(method: string, metadata: (name: string) => string | undefined, run: () => Promise<T>) => Promise<T>;
  /** Told of each call as it ends: its method, status name and seconds (the metrics). */
  observed?: (method: string, status: string, seconds: number) => void;
  /** A connection must have sent HTTP/2's preface within this (HTTP_HEADERS_TIMEOUT_MS), or is closed. */
  prefaceTimeoutMs: number;
  /** Bounds the listener's connections before they reach grpc-js (MAX_CONNECTIONS and the per-client cap HTTP's port has). */
  guard: (listener: net.Server) => void;
}

/** The bytes of HTTP/2's connection preface, which every gRPC client sends first. */
const PREFACE_BYTES = 24;

/** Logs one line per call, as the HTTP request log does, and tells the metrics. */
function finished({ method, logger, observed }: Route, requestId: string, startedAt: number, code: grpc.status): void {
  const ms = performance.now() - startedAt;
  const level = code === grpc.status.INTERNAL ? 'error' : code === grpc.status.OK ? 'info' : 'warn';
  logger[level](
    { reqId: requestId, method, grpc_status: grpc.status[code], duration_ms: Number(ms.toFixed(3)) },
    code === grpc.status.OK ? 'request completed' : 'request failed',
  );
  observed?.(method, grpc.status[code], ms / 1000);
}

/** One method as the server runs it: its name, the log, and what runs each call's handler (its span). */
interface Route {
  method: string;
  logger: Logger;
  within: <T>(context: GrpcCall, run: () => Promise<T>) => Promise<T>;
  observed?: GrpcServerOptions['observed'];
}

function unary(handler: UnaryHandler, route: Route): grpc.handleUnaryCall<unknown, unknown> {
  return (call, callback) => {
    const made = callOf(call);
    answer(() => route.within(made.context, () => handler(call.request, made.context)), made, callback, route);
  };
}

function gather(handler: GatherHandler, route: Route): grpc.handleClientStreamingCall<unknown, unknown> {
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
      finished(route, context.requestId, startedAt, grpc.status.OK);
      callback(null, response);
    },
    (err) => {
      const status = outcomeOf(err, context, route);
      answered();
      finished(route, context.requestId, startedAt, status.code!);
      callback(status);
    },
  );
}

function stream(handler: StreamHandler, route: Route): grpc.handleBidiStreamingCall<unknown, unknown> {
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
          finished(route, context.requestId, startedAt, grpc.status.OK);
          call.end();
        },
        (err) => {
          const status = outcomeOf(err, context, route);
          const cancelled = context.signal.aborted;
          answered();
          finished(route, context.requestId, startedAt, status.code!);
          if (!cancelled) call.emit('error', status);
        },
      );
  };
}

export interface GrpcServer {
  port: number;
  /** Stops taking calls; those in flight finish, until `graceMs` has passed. */
  stop(graceMs: number): Promise<void>;
}

/** Starts the server with `services`, health and reflection; resolves once it listens. */
export async function startGrpcServer(services: GrpcService[], options: GrpcServerOptions): Promise<GrpcServer> {
  const { logger } = options;
  const server = new grpc.Server({
    'grpc.max_receive_message_length': options.maxMessageBytes,
    'grpc.max_send_message_length': -1,
    // Channelz counts and timestamps every call for a debugging service this server does not offer.
    'grpc.enable_channelz': 0,
  });
  const definitions = protoLoader.loadSync([...new Set(services.map((s) => s.protoFile))], {
    ...LOADER_OPTIONS,
    includeDirs: [protoDir()],
  });
  const { traced } = options;
  const route = (method: string): Route => ({
    method,
    logger,
    observed: options.observed,
    within: (context, run) => (traced ? traced(method, context.metadata, run) : run()),
  });
  for (const service of services) {
    const definition = definitions[service.name] as protoLoader.ServiceDefinition;
    const implementation: grpc.UntypedServiceImplementation = {};
    for (const [method, handler] of Object.entries(service.unary))
      implementation[method] = unary(handler, route(`${service.name}/${method}`));
    for (const [method, handler] of Object.entries(service.streams ?? {}))
      implementation[method] = stream(handler, route(`${service.name}/${method}`));
    for (const [method, handler] of Object.entries(service.gathers ?? {}))
      implementation[method] = gather(handler, route(`${service.name}/${method}`));
    server.addService(definition, implementation);
  }
  // A probe asks for the server (''), or one service by name: each is as ready as the server.
  // Watchers are told of changes only.
  const health = new HealthImplementation();
  const names = ['', ...services.map((s) => s.name)];
  let told: ServingStatus | undefined;
  const refreshHealth = () => {
    const status: ServingStatus = options.ready() ? 'SERVING' : 'NOT_SERVING';
    if (status === told) return;
    told = status;
    for (const name of names) health.setStatus(name, status);
  };
  refreshHealth();
  const healthTimer = setInterval(refreshHealth, options.readyRefreshMs).unref();
  health.addToServer(server);
  new ReflectionService(definitions).addToServer(server);

  // The gateway holds the listening socket and hands grpc-js each connection it keeps: a flood of
  // idle or silent connections is bounded as HTTP's are (MAX_CONNECTIONS, the per-client cap, the
  // headers' timeout), which grpc-js's own listener has no setting for.
  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const listener = net.createServer();
  options.guard(listener);
  listener.on('connection', (socket) => {
    if (socket.destroyed) return;
    const silent = setTimeout(() => {
      if (socket.bytesRead < PREFACE_BYTES) socket.destroy();
    }, options.prefaceTimeoutMs).unref();
    socket.once('close', () => clearTimeout(silent));
    injector.injectConnection(socket);
  });
  await new Promise<void>((resolve, reject) => {
    listener.once('error', reject);
    listener.listen(options.port, options.host, () => {
      listener.off('error', reject);
      resolve();
    });
  });
  const port = (listener.address() as net.AddressInfo).port;
  return {
    port,
    stop: async (graceMs) => {
      clearInterval(healthTimer);
      listener.close();
      await new Promise<void>((resolve) => {
        const force = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, graceMs).unref();
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      });
    },
  };
}
