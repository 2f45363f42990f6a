import { Redis, type RedisOptions } from 'ioredis';

export type RedisRole =
  /** Workers: BullMQ's blocking fetches need unlimited retries; they wait for Redis to come back. */
  | 'worker'
  /** Gateway: a request must fail fast when Redis is gone, never queue behind a dead connection. */
  | 'gateway'
  /** Pub/sub subscribers: reconnect forever and resubscribe. */
  | 'subscriber';

export function createRedis(url: string, role: RedisRole, commandTimeoutMs = 2000, extra: RedisOptions = {}): Redis {
  const base: RedisOptions = {
    lazyConnect: false,
    // Reconnect quickly but not in a hot loop.
    retryStrategy: (times) => Math.min(50 * times, 1000),
    connectionName: `tserve-${role}`,
  };
  const byRole: Record<RedisRole, RedisOptions> = {
    worker: { maxRetriesPerRequest: null, enableReadyCheck: true },
    subscriber: { maxRetriesPerRequest: null },
    gateway: {
      maxRetriesPerRequest: 1,
      enableOfflineQueue: false,
      commandTimeout: commandTimeoutMs,
      // BullMQ runs its setup commands while the connection is still coming up.
      enableReadyCheck: true,
    },
  };
  const redis = new Redis(url, { ...base, ...byRole[role], ...extra });
  // ioredis reports connection loss as 'error' events; callers log them, none may crash the process.
  redis.on('error', () => {});
  return redis;
}

/**
 * Resolves once `redis` is ready, or after `timeoutMs` if it is not (Redis down at start-up). A
 * gateway connection has no offline queue: until it is ready, every command fails at once.
 */
export function whenReady(redis: Redis, timeoutMs: number): Promise<void> {
  if (redis.status === 'ready') return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      redis.off('ready', done);
      resolve();
    };
    const timer = setTimeout(done, timeoutMs);
    timer.unref();
    redis.once('ready', done);
  });
}

/** One PING with no retries: does anything answer at `url` right now? */
export async function redisAnswers(url: string, timeoutMs = 1500): Promise<boolean> {
  const client = new Redis(url, {
    lazyConnect: true,
    connectTimeout: timeoutMs,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableOfflineQueue: false,
  });
  client.on('error', () => {});
  try {
    await client.connect();
    return (await client.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}
