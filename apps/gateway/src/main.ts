#!/usr/bin/env node
// First: it sets a V8 flag before any other module allocates.
import './heap-flags.js';
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import { pino, type Logger } from 'pino';
import { ConfigError, formatHelp, loadGatewayConfig, type GatewayConfig } from '@tserve/config';
import { createRedis, exchangeDepths, keys, outcomesKeptMs, whenReady } from '@tserve/queue';
import { QueueSet } from './queues.js';
import { ModelRegistry } from './model-registry.js';
import { ResultWaiters } from './result-waiters.js';
import { UnreadAnswers } from './unread-answers.js';
import { createRedisBreaker } from './breaker.js';
import { InferenceService } from './inference.js';
import { EnqueueCoalescer } from './coalescer.js';
import { DirectRequests, goesDirect, type DirectTicket } from './direct-requests.js';
import { KeyStore, parseKeyFile } from './api-keys.js';
import { Quotas } from './quotas.js';
import { createApp, ROUTES } from './app.js';
import { expressServer } from './http-server.js';
import { createMetrics } from './metrics.js';
import { Admission } from './admission.js';
import { BodyBudget, QueueDepth } from './overload.js';
import { createSnapshot } from './snapshot.js';

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(
    formatHelp(
      `tserve gateway: HTTP front of the inference server; enqueues requests and answers with the workers' results.\n\nUsage: node apps/gateway/dist/main.js\n\nRoutes: ${ROUTES}`,
      ['gateway', 'common'],
    ),
  );
  process.exit(0);
}

/** A start-up failure whose message says all a user needs: printed alone, no stack. */
class StartupError extends Error {}

/** The API keys in force, or none (keys off) when neither API_KEYS_FILE nor API_KEYS is set. */
function loadKeys(config: GatewayConfig, logger: Logger): KeyStore | undefined {
  const report = (message: string, error?: boolean) => (error ? logger.error(message) : logger.info(message));
  try {
    const store = config.API_KEYS_FILE
      ? KeyStore.fromFile(config.API_KEYS_FILE, report)
      : config.API_KEYS
        ? new KeyStore(parseKeyFile(config.API_KEYS, 'API_KEYS'))
        : undefined;
    if (store) logger.info(`API keys on: ${store.size} key(s); inference routes need Authorization: Bearer <key>`);
    return store;
  } catch (err) {
    throw new StartupError(`gateway: cannot load API keys: ${err instanceof Error ? err.message : String(err)}`);
  }
}

async function main(): Promise<void> {
  const config = loadGatewayConfig();
  const gatewayId = `${os.hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
  const logger = pino({ level: config.LOG_LEVEL, base: { service: 'gateway', gateway: gatewayId } });
  // A last line of defence: a promise rejection nobody handled is a bug to log and fix, but not a
  // reason to drop every other client's connection. (Node's default would exit the process.)
  process.on('unhandledRejection', (reason) => {
    logger.error({ err: reason instanceof Error ? { message: reason.message, stack: reason.stack } : String(reason) }, 'unhandled rejection');
  });

  const redis = createRedis(config.REDIS_URL, 'gateway', config.REDIS_COMMAND_TIMEOUT_MS);
  const subscriber = createRedis(config.REDIS_URL, 'subscriber');
  const queues = new QueueSet(redis, config.QUEUE_PREFIX, config.RESULT_POLL_MS);
  const registry = new ModelRegistry(redis, config.QUEUE_PREFIX, config.REGISTRY_REFRESH_MS, config.LOAD_FAILURE_TTL_MS, logger);
  // A gateway's report older than a few refreshes is from one that stopped, and is ignored.
  const depthStaleMs = Math.max(3 * config.REGISTRY_REFRESH_MS, 2000);
  const depth = new QueueDepth((mine) => exchangeDepths(redis, config.QUEUE_PREFIX, gatewayId, mine, depthStaleMs));
  const breaker = createRedisBreaker(config, logger);
  const snapshot = createSnapshot(registry, depth, breaker);
  const bodies = new BodyBudget(config.MAX_BODIES_BYTES);
  // Clients that do not read their answers may not pin them, or the gateway's memory.
  const unread = new UnreadAnswers(config.MAX_UNREAD_ANSWERS_BYTES, config.HTTP_SEND_TIMEOUT_MS, (reason, unreadBytes) => {
    metrics.unreadAnswerClosed(reason);
    logger.warn({ reason, unreadBytes }, 'closed a connection whose client did not read its answer');
  });
  const metrics = createMetrics(
    snapshot,
    () => bodies.held,
    () => unread.held,
  );
  const direct = new DirectRequests(redis, config.QUEUE_PREFIX, outcomesKeptMs(config.RESULT_POLL_MS), (workerId) => registry.isLive(workerId));
  const results = new ResultWaiters(
    subscriber,
    keys.results(config.QUEUE_PREFIX, gatewayId),
    config.RESULT_POLL_MS,
    logger,
    metrics.unclaimed,
    (jobIds) => coalescer.taken(jobIds),
    {
      requests: direct,
      requeue: async ({ model, id }, requests) => {
        // Asks for the word: the coalescer may still hold requests behind this id (a word it does not expect, it ignores).
        await queues.enqueue(model, 'interactive', results.channel, [{ id, requests, tellTaken: true }]);
        return { queue: queues.get(model), id };
      },
      onRequeued: metrics.directRequeued,
    },
    (jobId) => redis.getBuffer(keys.jobOutcome(config.QUEUE_PREFIX, jobId)),
  );
  const coalescer = new EnqueueCoalescer<DirectTicket[] | undefined>(
    (model, priority, jobs) =>
      breaker.guard(async () => {
        const entries = config.DIRECT_REQUESTS ? registry.directEntries(model) : undefined;
        if (goesDirect(priority, jobs, entries)) {
          const tickets = await direct.send(model, jobs, results.channel, entries === 'lone');
          metrics.directSent(
            model,
            jobs.reduce((n, job) => n + job.requests.length, 0),
          );
          return tickets;
        }
        await queues.enqueue(model, priority, results.channel, jobs);
        return undefined;
      }),
    (model) => registry.batchSize(model),
    (model) => registry.tellsTaken(model),
    (model, sending) => depth.own(model) > sending,
    // A worker's word that it took a job is lost only as a result message is: the same period covers both.
    config.RESULT_POLL_MS,
  );
  const apiKeys = loadKeys(config, logger);
  const quotas = apiKeys ? new Quotas(redis, config.QUEUE_PREFIX) : undefined;
  const admission = new Admission({
    keys: apiKeys,
    quotas,
    limits: { maxQueueDepth: config.MAX_QUEUE_DEPTH, batchQueueShare: config.BATCH_QUEUE_SHARE, maxInputsPerRequest: config.MAX_INPUTS_PER_REQUEST },
    depth,
    bodies: { budget: bodies, maxBytes: config.MAX_BODY_BYTES },
    breaker,
    isServed: (model) => registry.get(model) !== undefined,
    requestTimeoutMs: config.REQUEST_TIMEOUT_MS,
    onQuotaRejected: metrics.quotaRejected,
  });
  const service = new InferenceService(config, registry, queues, coalescer, results, admission, redis, metrics);
  const app = createApp({ config, logger, service, registry, queues, snapshot, metrics, admission, backlog: (model) => depth.of(model) });

  await results.start();
  // The first refresh would otherwise fail on a connection still coming up, and until the next one
  // every request would be refused as if Redis were down. Bounded: a Redis that is down at start-up
  // is reported by /ready, and the gateway starts anyway.
  await whenReady(redis, config.REDIS_COMMAND_TIMEOUT_MS);
  await registry.start();
  await depth.start(() => registry.served().map((m) => m.id), config.REGISTRY_REFRESH_MS);

  // Slow-drip clients may not pin connections: a request must arrive whole within these bounds
  // (Node checks them every connectionsCheckingInterval, so that is kept well below them).
  const server = expressServer(
    app,
    {
      headersTimeout: Math.min(config.HTTP_HEADERS_TIMEOUT_MS, config.HTTP_REQUEST_TIMEOUT_MS),
      requestTimeout: config.HTTP_REQUEST_TIMEOUT_MS,
      connectionsCheckingInterval: Math.max(100, Math.min(1000, config.HTTP_HEADERS_TIMEOUT_MS / 4)),
    },
    (res) => unread.written(res),
  );
  server.keepAliveTimeout = 65_000;
  server.maxConnections = config.MAX_CONNECTIONS;
  server.on('drop', metrics.connectionDropped);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.PORT, config.HOST, () => {
      server.off('error', reject);
      resolve();
    });
  }).catch((err: NodeJS.ErrnoException) => {
    const why = err.code === 'EADDRINUSE' ? 'is already in use' : err.code === 'EACCES' ? 'needs more privileges' : `cannot be opened (${err.message})`;
    throw new StartupError(`gateway: port ${config.PORT} on ${config.HOST} ${why}; set PORT to a free port`);
  });
  const port = (server.address() as AddressInfo).port;
  logger.info({ port }, `gateway listening on http://${config.HOST}:${port}`);

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal, pending: results.pending }, 'stopping: answering requests in flight');
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    // Keep-alive connections go idle as their last answers leave; close them as they do.
    const closeIdle = setInterval(() => server.closeIdleConnections(), 50);
    server.closeIdleConnections();
    const grace = new Promise<void>((resolve) => setTimeout(resolve, config.SHUTDOWN_GRACE_MS).unref());
    await Promise.race([closed, grace]);
    clearInterval(closeIdle);
    registry.stop();
    depth.stop();
    apiKeys?.stop();
    await results.stop();
    await queues.close();
    await Promise.allSettled([redis.quit(), subscriber.quit()]);
    logger.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
}

main().catch((err) => {
  process.stderr.write(`${err instanceof ConfigError || err instanceof StartupError ? err.message : `gateway failed: ${String(err)}`}\n`);
  process.exit(1);
});
