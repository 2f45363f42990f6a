#!/usr/bin/env node
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { pino } from 'pino';
import { ConfigError, formatHelp, loadGatewayConfig } from '@tserve/config';
import { createRedis, keys } from '@tserve/queue';
import { QueueSet } from './queues.js';
import { ModelRegistry } from './model-registry.js';
import { ResultRouter } from './result-router.js';
import { createRedisBreaker } from './breaker.js';
import { InferenceService } from './inference.js';
import { createApp } from './app.js';
import { createMetrics } from './metrics.js';

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(
    formatHelp(
      'tserve gateway: HTTP front of the inference server; enqueues requests and answers with the workers\' results.\n\nUsage: node apps/gateway/dist/main.js\n\nRoutes: POST /  POST /models/<model id>  GET /health  GET /ready  GET /metrics  /admin/queues',
      ['gateway', 'common'],
    ),
  );
  process.exit(0);
}

async function main(): Promise<void> {
  const config = loadGatewayConfig();
  const gatewayId = `${os.hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
  const logger = pino({ level: config.LOG_LEVEL, base: { service: 'gateway', gateway: gatewayId } });

  const redis = createRedis(config.REDIS_URL, 'gateway', config.REDIS_COMMAND_TIMEOUT_MS);
  const subscriber = createRedis(config.REDIS_URL, 'subscriber');
  const queues = new QueueSet(redis, config.QUEUE_PREFIX);
  const registry = new ModelRegistry(redis, config.QUEUE_PREFIX, queues, config.REGISTRY_REFRESH_MS, config.LOAD_FAILURE_TTL_MS, logger);
  const router = new ResultRouter(subscriber, keys.results(config.QUEUE_PREFIX, gatewayId), config.RESULT_POLL_MS, logger);
  const breaker = createRedisBreaker(config, logger);
  const metrics = createMetrics(registry, breaker);
  const service = new InferenceService(config, registry, queues, router, breaker, metrics.observeTiming);
  const app = createApp({ config, logger, service, registry, queues, breaker, metrics });

  await router.start();
  await registry.start();

  const server = app.listen(config.PORT, config.HOST, () => {
    const address = server.address();
    const port = typeof address === 'object' && address ? address.port : config.PORT;
    logger.info({ port }, `gateway listening on http://${config.HOST}:${port}`);
  });
  server.keepAliveTimeout = 65_000;

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal, pending: router.pending }, 'stopping: answering requests in flight');
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    // Keep-alive connections go idle as their last answers leave; close them as they do.
    const closeIdle = setInterval(() => server.closeIdleConnections(), 50);
    server.closeIdleConnections();
    const grace = new Promise<void>((resolve) => setTimeout(resolve, config.SHUTDOWN_GRACE_MS).unref());
    await Promise.race([closed, grace]);
    clearInterval(closeIdle);
    registry.stop();
    await router.stop();
    await queues.close();
    await Promise.allSettled([redis.quit(), subscriber.quit()]);
    logger.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
}

main().catch((err) => {
  process.stderr.write(`${err instanceof ConfigError ? err.message : `gateway failed: ${String(err)}`}\n`);
  process.exit(1);
});
