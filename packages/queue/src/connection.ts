import fs from 'node:fs';
import { Redis, type RedisOptions } from 'ioredis';

export type RedisRole =
  /** Workers: BullMQ's blocking fetches need unlimited retries; they wait for Redis to come back. */
  | 'worker'
  /** Gateway: a request must fail fast when Redis is gone, never queue behind a dead connection. */
  | 'gateway'
  /** Pub/sub subscribers: reconnect forever and resubscribe. */
  | 'subscriber';

/**
 * Where Redis is and how to reach it: the settings of packages/config that every connection reads
 * (docs/configuration.md). A bare URL is a single server, without a CA of its own.
 */
export interface RedisSettings {
  REDIS_URL: string;
  /** With any, the primary is asked of these sentinels, and REDIS_URL's host is ignored. */
  REDIS_SENTINELS: ReadonlyArray<{ host: string; port: number }>;
  REDIS_SENTINEL_MASTER: string;
  REDIS_SENTINEL_PASSWORD?: string;
  /** A CA file (PEM) for a rediss:// server whose certificate no public CA signed. */
  REDIS_TLS_CA?: string;
}

export type RedisTarget = string | RedisSettings;

/**
 * Redis cannot be used with these settings, and trying again will not change that: a password or
 * ACL user it refuses, a certificate that does not verify, a CA file that cannot be read, a primary
 * the sentinels do not know. Its message names the setting to fix; programs print it alone.
 */
export class RedisSettingsError extends Error {}

const settingsOf = (target: RedisTarget): RedisSettings =>
  typeof target === 'string' ? { REDIS_URL: target, REDIS_SENTINELS: [], REDIS_SENTINEL_MASTER: 'mymaster' } : target;

/** Whether the primary is found through sentinels (REDIS_SENTINELS), rather than at REDIS_URL. */
export const throughSentinels = (target: RedisTarget): boolean => settingsOf(target).REDIS_SENTINELS.length > 0;

/** Where connections go, for messages: REDIS_URL without its password, or the sentinels and the primary's name. */
export function describeTarget(target: RedisTarget): string {
  const settings = settingsOf(target);
  const url = new URL(settings.REDIS_URL);
  if (url.password) url.password = '***';
  if (!throughSentinels(settings)) return `REDIS_URL=${url.href}`;
  const sentinels = settings.REDIS_SENTINELS.map((s) => `${s.host}:${s.port}`).join(',');
  return `primary "${settings.REDIS_SENTINEL_MASTER}" of REDIS_SENTINELS=${sentinels}`;
}

function readCa(file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code ?? String(err);
    throw new RedisSettingsError(`REDIS_TLS_CA: cannot read ${file} (${why})`);
  }
}

/**
 * ioredis' options for the settings: the user, password, database and TLS of REDIS_URL, and either
 * its host or, with REDIS_SENTINELS, the sentinels, which name the primary at each (re)connection.
 */
export function redisOptions(target: RedisTarget): RedisOptions {
  const settings = settingsOf(target);
  const url = new URL(settings.REDIS_URL);
  const auth: RedisOptions = {
    username: decodeURIComponent(url.username) || undefined,
    password: decodeURIComponent(url.password) || undefined,
    db: Number(url.pathname.slice(1)) || 0,
  };
  const tls =
    url.protocol === 'rediss:' ? (settings.REDIS_TLS_CA ? { ca: readCa(settings.REDIS_TLS_CA) } : {}) : undefined;
  if (!throughSentinels(settings))
    return { ...auth, host: url.hostname.replace(/^\[|\]$/g, ''), port: Number(url.port) || 6379, tls };
  return {
    ...auth,
    sentinels: settings.REDIS_SENTINELS.map(({ host, port }) => ({ host, port })),
    name: settings.REDIS_SENTINEL_MASTER,
    sentinelPassword: settings.REDIS_SENTINEL_PASSWORD,
    role: 'master',
    // TLS for the sentinels too: a deployment that encrypts its servers encrypts its sentinels.
    ...(tls ? { tls, enableTLSForSentinelMode: true, sentinelTLS: tls } : {}),
    // Told of a failover by the sentinels (+switch-master), a connection moves at once, without
    // waiting for its old primary to fail it: a partitioned primary may still answer.
    failoverDetector: true,
    // A dead primary's host may not refuse, only stay silent: the next sentinel's answer must not
    // wait behind ioredis' 10 s default.
    connectTimeout: 3000,
  };
}

export function createRedis(
  target: RedisTarget,
  role: RedisRole,
  commandTimeoutMs = 2000,
  extra: RedisOptions = {},
): Redis {
  const base: RedisOptions = {
    ...redisOptions(target),
    lazyConnect: false,
    // Reconnect quickly but not in a hot loop.
    retryStrategy: (times) => Math.min(50 * times, 1000),
    // A primary demoted to a replica (its failover done while it was cut off) refuses writes with
    // READONLY: reconnect, to the primary the sentinels name now, and send the command again.
    reconnectOnError: (err) => (/^READONLY/.test(err.message) ? 2 : false),
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
  const redis = new Redis({ ...base, ...byRole[role], ...extra });
  // ioredis reports connection loss as 'error' events; callers log them, none may crash the process.
  redis.on('error', () => {});
  if (throughSentinels(target)) keepConnected(redis);
  return redis;
}

/** How soon a connection ioredis gave up on is started again. */
const RESTART_MS = 500;

/**
 * ioredis gives a connection up for good (`end`) when its connector fails outright. Through
 * sentinels that happens when the failover detector, told of a new primary, disconnects the
 * connector while a reconnection is asking the sentinels where the primary is: that reconnection
 * fails, and ioredis tries no other (shown by disconnecting the connector while it connects).
 * test/failover.test.ts once saw a gateway still without Redis a minute after a failover. A
 * connection ended by anything but this program's own quit or disconnect is started again.
 */
function keepConnected(redis: Redis): void {
  let closedHere = false;
  const quit = redis.quit.bind(redis);
  const disconnect = redis.disconnect.bind(redis);
  redis.quit = (...args: Parameters<Redis['quit']>) => {
    closedHere = true;
    return quit(...args);
  };
  redis.disconnect = (reconnect?: boolean) => {
    closedHere ||= !reconnect;
    disconnect(reconnect);
  };
  redis.on('end', () => {
    if (closedHere) return;
    const restart = setTimeout(() => {
      if (!closedHere && redis.status === 'end') redis.connect().catch(() => {});
    }, RESTART_MS);
    restart.unref();
  });
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
