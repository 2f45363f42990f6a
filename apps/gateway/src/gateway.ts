import type { Express } from 'express';
import type { Logger } from 'pino';
import type { Redis } from 'ioredis';
import type { GatewayConfig } from '@tserve/config';
import type { Tracing } from '@tserve/telemetry';
import { createRedis, DepthExchange, keys, whenReady } from '@tserve/queue';
import { ModelRegistry } from './serving/model-registry.js';
import { QueueDepth, BodyBudget, depthLimit, Overload } from './admission/overload.js';
import { createRedisBreaker } from './admission/breaker.js';
import { Transport } from './transport/index.js';
import { createSnapshot } from './serving/snapshot.js';
import { UnreadAnswers } from './http/unread-answers.js';
import { createMetrics } from './ops/metrics.js';
import { KeyStore, parseKeyFile } from './admission/api-keys.js';
import { Quotas } from './admission/quotas.js';
import { Admission } from './admission/admission.js';
import { InferenceService } from './serving/inference.js';
import { ResponseCache } from './serving/response-cache.js';
import { createApp } from './app.js';
import { GatewayTracing } from './serving/tracing.js';
import { kserveGrpc } from './protocols/kserve-grpc.js';
import { teiGrpc } from './protocols/tei-grpc.js';
import type { GrpcService } from './grpc/grpc-calls.js';
import { notReadyReasons } from './ops/health.js';
import { FileStore, OfflineKeys } from './offline/files.js';
import { BatchStore } from './offline/batches.js';
import { BatchRunner } from './offline/batch-runner.js';
import { LineCallers } from './admission/line-callers.js';
import { BULK } from '@tserve/contract';

/** A start-up failure whose message says all a user needs: printed alone, no stack. */
export class StartupError extends Error {}

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

/**
 * The response cache (RESPONSE_CACHE_TTL_S), under a prefix of its own beside the queues' keys, on
 * their connection, or on RESPONSE_CACHE_REDIS_URL: a single server, its CA REDIS_TLS_CA.
 */
function responseCache(config: GatewayConfig, queues: Redis, logger: Logger): { cache: ResponseCache; redis: Redis } {
  const url = config.RESPONSE_CACHE_REDIS_URL;
  const redis = url
    ? createRedis({ ...config, REDIS_URL: url, REDIS_SENTINELS: [] }, 'gateway', config.REDIS_COMMAND_TIMEOUT_MS)
    : queues;
  // A Redis that fails every command would log once a request: once a period is enough to see it.
  let loggedAt = 0;
  const onError = (err: unknown) => {
    if (Date.now() - loggedAt < 10_000) return;
    loggedAt = Date.now();
    logger.warn({ err: String(err) }, 'response cache: Redis failed; requests are computed afresh meanwhile');
  };
  logger.info(
    `response cache on: answers kept ${config.RESPONSE_CACHE_TTL_S} s, at most ${config.RESPONSE_CACHE_MAX_MB} MB`,
  );
  const cache = new ResponseCache({
    redis,
    prefix: keys.responseCache(config.QUEUE_PREFIX),
    ttlSeconds: config.RESPONSE_CACHE_TTL_S,
    maxMb: config.RESPONSE_CACHE_MAX_MB,
    onError,
  });
  return { cache, redis };
}

/** Clients that do not read their answers may not pin them, or the gateway's memory. */
function unreadAnswers(config: GatewayConfig, logger: Logger): UnreadAnswers {
  return new UnreadAnswers(config.MAX_UNREAD_ANSWERS_BYTES, config.HTTP_SEND_TIMEOUT_MS, (reason, unreadBytes) =>
    logger.warn({ reason, unreadBytes }, 'closed a connection whose client did not read its answer'),
  );
}

/** Admission: the API keys and their quotas, and the limits every request is held to. */
function createAdmission(
  config: GatewayConfig,
  logger: Logger,
  redis: Redis,
  parts: {
    depth: QueueDepth;
    bodies: BodyBudget;
    breaker: ReturnType<typeof createRedisBreaker>;
    registry: ModelRegistry;
    metrics: ReturnType<typeof createMetrics>;
  },
): { admission: Admission; apiKeys?: KeyStore; lines?: LineCallers } {
  const apiKeys = loadKeys(config, logger);
  const lines = apiKeys && new LineCallers(apiKeys);
  const limits = {
    maxQueueDepth: config.MAX_QUEUE_DEPTH,
    batchQueueShare: config.BATCH_QUEUE_SHARE,
    maxInputsPerRequest: config.MAX_INPUTS_PER_REQUEST,
  };
  const overload = new Overload(limits, parts.depth);
  // Only the queues of models served or configured are bounded: as the registry reads them, not per request.
  parts.registry.watch((registry) => overload.bound(registry.servedOrConfigured()));
  const admission = new Admission({
    keys: apiKeys,
    lines,
    quotas: apiKeys ? new Quotas(redis, config.QUEUE_PREFIX) : undefined,
    overload,
    bodies: { budget: parts.bodies },
    breaker: parts.breaker,
    requestTimeoutMs: config.REQUEST_TIMEOUT_MS,
    onQuotaRejected: parts.metrics.quotaRejected,
  });
  return { admission, apiKeys, lines };
}

/** OpenAI's Batch API: its files and batches in Redis, and the runner of this gateway's share of them. */
function createOffline(
  config: GatewayConfig,
  parts: { redis: Redis; gatewayId: string; logger: Logger; lines?: LineCallers; registry: ModelRegistry },
) {
  const { redis, gatewayId, logger, lines } = parts;
  const keys = new OfflineKeys(config.QUEUE_PREFIX);
  const files = new FileStore(redis, keys, {
    maxBytes: config.FILES_MAX_MB * 1e6,
    maxLines: config.FILES_MAX_LINES,
    storeMaxBytes: config.FILES_STORE_MAX_MB * 1e6,
    ttlS: config.FILES_TTL_S,
  });
  const batches = new BatchStore(redis, keys, config.FILES_TTL_S);
  const runner = new BatchRunner({
    redis,
    files,
    batches,
    gatewayId,
    // A gateway that died leaves its batches to the others (or to itself, restarted) after this.
    leaseMs: Math.max(10 * config.REGISTRY_REFRESH_MS, 5000),
    models: parts.registry,
    bulkDepth: depthLimit({ maxQueueDepth: config.MAX_QUEUE_DEPTH, batchQueueShare: config.BATCH_QUEUE_SHARE }, BULK),
    headersFor: (owner): Record<string, string> => (lines ? { authorization: `Bearer ${lines.tokenFor(owner)}` } : {}),
    logger,
  });
  return { files, batches, runner };
}

/** Connects to Redis and starts the background reads; then the app may take requests. */
async function start(
  config: GatewayConfig,
  {
    redis,
    transport,
    registry,
    depth,
  }: { redis: Redis; transport: Transport; registry: ModelRegistry; depth: QueueDepth },
): Promise<void> {
  await transport.start();
  // The first refresh would otherwise fail on a connection still coming up, and until the next
  // one every request would be refused as if Redis were down. Bounded: a Redis that is down at
  // start-up is reported by /ready, and the gateway starts anyway.
  await whenReady(redis, config.REDIS_COMMAND_TIMEOUT_MS);
  await registry.start();
  await depth.start(registry, config.REGISTRY_REFRESH_MS);
}

export interface Gateway {
  app: Express;
  /**
   * The services the gRPC server serves (GRPC_PORT), whether it is ready (as `/ready`) for its
   * health service, each call's server span where tracing is on, and its metrics.
   */
  grpc: {
    services: GrpcService[];
    ready: () => boolean;
    traced?: GatewayTracing['grpcCall'];
    observed: (method: string, status: string, seconds: number) => void;
  };
  unread: UnreadAnswers;
  /** Counts a client connection closed on arrival (the server's 'drop' event). */
  connectionDropped: () => void;
  /** Requests waiting for their outcomes. */
  readonly pending: number;
  /** Starts running batches, whose lines go to this gateway's HTTP port at `origin`. */
  runBatches(origin: { host: string; port: number; root: string }): void;
  /** Stops running batches: first, as the gateway stops, so that their lines leave its port idle. */
  stopBatches(): Promise<void>;
  /** Connects to Redis and starts the background reads; then the app may take requests. */
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** How long a request waits: unrun in the queue, and for a lost Redis to come back. */
const limits = (config: GatewayConfig) => ({
  unrunMs: config.REQUEST_TIMEOUT_MS,
  failoverWaitMs: config.REDIS_FAILOVER_WAIT_MS,
});

/**
 * The gateway's link to Redis and the workers: its two connections, the served models, the queue
 * depths the gateways share, the breaker on Redis writes, and the transport over them.
 */
function createLink(config: GatewayConfig, gatewayId: string, logger: Logger) {
  const redis = createRedis(config, 'gateway', config.REDIS_COMMAND_TIMEOUT_MS);
  const subscriber = createRedis(config, 'subscriber');
  const registry = new ModelRegistry({
    redis,
    prefix: config.QUEUE_PREFIX,
    refreshMs: config.REGISTRY_REFRESH_MS,
    failureTtlMs: config.LOAD_FAILURE_TTL_MS,
    logger,
    configured: config.MODELS,
  });
  // A gateway's report older than a few refreshes is from one that stopped, and is ignored.
  const depthStaleMs = Math.max(3 * config.REGISTRY_REFRESH_MS, 2000);
  const depth = new QueueDepth(new DepthExchange(redis, config.QUEUE_PREFIX, gatewayId, depthStaleMs));
  const breaker = createRedisBreaker(config, logger);
  const transport = new Transport(
    {
      redis,
      subscriber,
      models: registry,
      depth,
      breaker,
      logger,
    },
    { prefix: config.QUEUE_PREFIX, gatewayId, resultPollMs: config.RESULT_POLL_MS, ...limits(config) },
  );
  return { redis, subscriber, registry, depth, breaker, transport };
}

/** Builds the gateway's parts, each from those before it. `tracing`: where OpenTelemetry is configured. */
export function createGateway(config: GatewayConfig, gatewayId: string, logger: Logger, tracing?: Tracing): Gateway {
  const { redis, subscriber, registry, depth, breaker, transport } = createLink(config, gatewayId, logger);
  const snapshot = createSnapshot(registry, depth, breaker, transport);
  const bodies = new BodyBudget(config.MAX_BODIES_BYTES);
  const unread = unreadAnswers(config, logger);
  const cached = config.RESPONSE_CACHE_TTL_S > 0 ? responseCache(config, redis, logger) : undefined;
  const cache = cached?.cache;
  const metrics = createMetrics({ snapshot, transport, bodies, unread, cache });
  const { admission, apiKeys, lines } = createAdmission(config, logger, redis, {
    depth,
    bodies,
    breaker,
    registry,
    metrics,
  });
  const offline = createOffline(config, { redis, gatewayId, logger, lines, registry });
  const traces = tracing && new GatewayTracing(tracing);
  const service = new InferenceService({
    registry,
    admission,
    trips: transport.trips,
    observer: metrics,
    cache,
    tracing: traces,
  });
  const app = createApp({
    traceRequests: traces?.middleware,
    config,
    logger,
    service,
    registry,
    transport,
    snapshot,
    metrics,
    admission,
    depth,
    offline: { files: offline.files, batches: offline.batches, started: () => offline.runner.kick() },
  });

  const grpc = {
    services: [
      kserveGrpc({ config, service, registry, admission, logger, snapshot }),
      ...teiGrpc({ config, service, registry, admission, logger }),
    ],
    ready: () => notReadyReasons(snapshot(), config.DEFAULT_MODEL).length === 0,
    traced: traces?.grpcCall,
    observed: metrics.grpcCall,
  };

  return {
    app,
    grpc,
    unread,
    connectionDropped: metrics.connectionDropped,
    get pending() {
      return transport.pending;
    },
    start: () => start(config, { redis, transport, registry, depth }),
    runBatches: (origin) => offline.runner.start(origin),
    stopBatches: () => offline.runner.stop(),
    async stop() {
      await offline.runner.stop();
      registry.stop();
      depth.stop();
      apiKeys?.stop();
      await transport.stop();
      await Promise.allSettled([
        redis.quit(),
        subscriber.quit(),
        ...(cached && cached.redis !== redis ? [cached.redis.quit()] : []),
        traces?.shutdown(),
      ]);
    },
  };
}
