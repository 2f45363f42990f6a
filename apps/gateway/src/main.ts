#!/usr/bin/env node
// First: it sets a V8 flag before any other module allocates.
import './http/heap-flags.js';
import { randomUUID } from 'node:crypto';
import type { AddressInfo, Server as NetServer } from 'node:net';
import os from 'node:os';
import { ConfigError, formatHelp, loadGatewayConfig } from '@tserve/config';
import { createLogger, startTracing, TracingConfigError } from '@tserve/telemetry';
import { assertRedisAccepts, RedisSettingsError } from '@tserve/queue';
import { createGateway, StartupError } from './gateway.js';
import { ROUTES } from './app.js';
import { expressServer, slowClientTimeouts } from './http/http-server.js';
import { capConnectionsPerClient } from './http/client-connections.js';
import { answerMalformedRequests } from './http/malformed-requests.js';
import { startGrpcServer, type GrpcServer } from './grpc/grpc-server.js';
import { loopbackHost } from './offline/line-client.js';

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(
    formatHelp(
      `tserve gateway: HTTP front of the inference server; enqueues requests and answers with the workers' results.\n\nUsage: node apps/gateway/dist/main.js\n\nRoutes: ${ROUTES}`,
      ['gateway', 'common'],
    ),
  );
  process.exit(0);
}

async function main(): Promise<void> {
  const config = loadGatewayConfig();
  const gatewayId = `${os.hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
  const logger = createLogger({
    level: config.LOG_LEVEL,
    format: config.LOG_FORMAT,
    base: { service: 'gateway', gateway: gatewayId },
  });
  // A last line of defence: a promise rejection nobody handled is a bug to log and fix, but not a
  // reason to drop every other client's connection. (Node's default would exit the process.)
  process.on('unhandledRejection', (reason) => {
    logger.error(
      { err: reason instanceof Error ? { message: reason.message, stack: reason.stack } : String(reason) },
      'unhandled rejection',
    );
  });

  const tracing = await startTracing('tserve-gateway');
  if (tracing) logger.info('tracing on: exporting spans over OTLP (docs/tracing.md)');
  // A Redis that refuses these settings (a password, a certificate) would be retried forever in
  // silence: the gateway stops here with the reason instead. One that is down is waited for.
  await assertRedisAccepts(config, config.REDIS_COMMAND_TIMEOUT_MS);
  const gateway = createGateway(config, gatewayId, logger, tracing);
  await gateway.start();

  const server = expressServer(
    gateway.app,
    slowClientTimeouts(config.HTTP_HEADERS_TIMEOUT_MS, config.HTTP_REQUEST_TIMEOUT_MS),
    (res) => gateway.unread.written(res),
  );
  server.keepAliveTimeout = 65_000;
  guardConnections(server, config, gateway);
  answerMalformedRequests(server);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.PORT, config.HOST, () => {
      server.off('error', reject);
      resolve();
    });
  }).catch((err: NodeJS.ErrnoException) => {
    const why =
      err.code === 'EADDRINUSE'
        ? 'is already in use'
        : err.code === 'EACCES'
          ? 'needs more privileges'
          : `cannot be opened (${err.message})`;
    throw new StartupError(`gateway: port ${config.PORT} on ${config.HOST} ${why}; set PORT to a free port`);
  });
  const port = (server.address() as AddressInfo).port;
  logger.info({ port }, `gateway listening on http://${config.HOST}:${port}`);
  gateway.runBatches({ host: loopbackHost(config.HOST), port, root: config.ROOT_PATH ?? '' });
  const grpc = config.GRPC_PORT > 0 ? await startGrpc(config, gateway, logger) : undefined;

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal, pending: gateway.pending }, 'stopping: answering requests in flight');
    // A batch's lines would keep the port busy: the batches stop first, and wait for another gateway.
    await gateway.stopBatches();
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    // Keep-alive connections go idle as their last answers leave; close them as they do.
    const closeIdle = setInterval(() => server.closeIdleConnections(), 50);
    server.closeIdleConnections();
    const grace = new Promise<void>((resolve) => setTimeout(resolve, config.SHUTDOWN_GRACE_MS).unref());
    await Promise.all([Promise.race([closed, grace]), grpc?.stop(config.SHUTDOWN_GRACE_MS)]);
    clearInterval(closeIdle);
    await gateway.stop();
    logger.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
}

/**
 * Holds at most MAX_CONNECTIONS on a port, counting those it closes on arrival, and caps one
 * client's share of them: HTTP's port and gRPC's alike.
 */
function guardConnections(
  server: NetServer,
  config: ReturnType<typeof loadGatewayConfig>,
  gateway: ReturnType<typeof createGateway>,
): void {
  server.maxConnections = config.MAX_CONNECTIONS;
  server.on('drop', gateway.connectionDropped);
  capConnectionsPerClient(
    server,
    { maxPerClient: config.MAX_CONNECTIONS_PER_CLIENT, maxConnections: config.MAX_CONNECTIONS },
    gateway.connectionDropped,
  );
}

/** The gRPC server on GRPC_PORT, beside HTTP; a port it cannot open stops the start, as HTTP's does. */
async function startGrpc(
  config: ReturnType<typeof loadGatewayConfig>,
  gateway: ReturnType<typeof createGateway>,
  logger: ReturnType<typeof createLogger>,
): Promise<GrpcServer> {
  const grpc = await startGrpcServer(gateway.grpc.services, {
    port: config.GRPC_PORT,
    host: config.HOST,
    maxMessageBytes: config.MAX_BODY_BYTES,
    logger,
    ready: gateway.grpc.ready,
    readyRefreshMs: config.REGISTRY_REFRESH_MS,
    traced: gateway.grpc.traced,
    observed: gateway.grpc.observed,
    prefaceTimeoutMs: config.HTTP_HEADERS_TIMEOUT_MS,
    guard: (listener) => guardConnections(listener, config, gateway),
  }).catch((err: Error) => {
    throw new StartupError(
      `gateway: gRPC port ${config.GRPC_PORT} on ${config.HOST} cannot be opened (${err.message}); set GRPC_PORT to a free port, or 0 to turn gRPC off`,
    );
  });
  logger.info({ grpcPort: grpc.port }, `gateway gRPC listening on ${config.HOST}:${grpc.port}`);
  return grpc;
}

main().catch((err) => {
  process.stderr.write(
    `${err instanceof ConfigError || err instanceof StartupError || err instanceof TracingConfigError ? err.message : err instanceof RedisSettingsError ? `gateway: ${err.message}` : `gateway failed: ${String(err)}`}\n`,
  );
  process.exit(1);
});
