import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { HealthImplementation, type ServingStatus } from 'grpc-health-check';
import { ReflectionService } from '@grpc/reflection';
import type { Logger } from 'pino';
import { gather, stream, unary, type GrpcService, type Route } from './grpc-calls.js';

/**
 * The gateway's gRPC server (GRPC_PORT): with grpc-calls.ts, the one module on `@grpc/grpc-js`. It
 * loads the services' `.proto` files from the contract package, serves `grpc.health.v1.Health` and
 * server reflection beside them, and runs each protocol's handlers as grpc-calls.ts makes their calls.
 */

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
  observed?: Route['observed'];
  /** A connection must have sent HTTP/2's preface within this (HTTP_HEADERS_TIMEOUT_MS), or is closed. */
  prefaceTimeoutMs: number;
  /** Bounds the listener's connections before they reach grpc-js (MAX_CONNECTIONS and the per-client cap HTTP's port has). */
  guard: (listener: net.Server) => void;
}

/** The bytes of HTTP/2's connection preface, which every gRPC client sends first. */
const PREFACE_BYTES = 24;

/**
 * Serves grpc.health.v1: a probe asks for the server (''), or one service by name, and each is as
 * ready as the server. Watchers are told of changes only. Returns the timer that refreshes it.
 */
function serveHealth(server: grpc.Server, services: GrpcService[], options: GrpcServerOptions): NodeJS.Timeout {
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
  health.addToServer(server);
  return setInterval(refreshHealth, options.readyRefreshMs).unref();
}

/**
 * The gateway holds the listening socket and hands grpc-js each connection it keeps: a flood of
 * idle or silent connections is bounded as HTTP's are (MAX_CONNECTIONS, the per-client cap, the
 * headers' timeout), which grpc-js's own listener has no setting for.
 */
async function listen(server: grpc.Server, options: GrpcServerOptions): Promise<net.Server> {
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
  return listener;
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
  const healthTimer = serveHealth(server, services, options);
  new ReflectionService(definitions).addToServer(server);

  const listener = await listen(server, options);
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
