import { z } from 'zod';
import { ADVANCED, derived, int, optionalString, setting } from '../setting.js';

/** The settings every program reads: Redis, logging, and how soon a worker counts as gone. */

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;

/** A sentinel's address, `host:port` (`[v6]:port`); the port is Sentinel's 26379 where left out. */
const SENTINEL = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+)(?::(\d{1,5}))?$/;

export const commonShape = {
  REDIS_URL: setting(
    z
      .string()
      .url()
      .refine((url) => /^rediss?:\/\//.test(url), 'a redis:// or rediss:// (TLS) URL')
      .default('redis://127.0.0.1:6379'),
    [
      'Redis holding the queues: redis://[user:password@]host:port[/db], rediss:// for TLS',
      "user and password are an ACL user's (or the password alone: redis://:password@host); with REDIS_SENTINELS set, the host and port are ignored and the user, password, database and TLS still apply",
    ],
  ),
  REDIS_SENTINELS: setting(
    z
      .string()
      .optional()
      .transform((v, ctx) => {
        const items = (v ?? '')
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean);
        const sentinels = [];
        for (const item of items) {
          const match = SENTINEL.exec(item);
          const port = Number(match?.[2] ?? 26379);
          if (!match || port < 1 || port > 65535) {
            ctx.addIssue({ code: 'custom', message: `"${item}" is not host:port` });
            return z.NEVER;
          }
          sentinels.push({ host: match[1].replace(/^\[|\]$/g, ''), port });
        }
        return sentinels;
      }),
    [
      'Redis Sentinel: its sentinels as host:port, comma-separated; the primary is asked of them',
      "every connection asks the sentinels for REDIS_SENTINEL_MASTER's primary, and follows a failover to the new one by itself (docs/operations.md, Redis failover)",
    ],
    '(off: REDIS_URL)',
  ).meta(ADVANCED),
  REDIS_SENTINEL_MASTER: setting(
    z.string().min(1).default('mymaster'),
    "the name the sentinels know the primary by (sentinel monitor's <master-name>)",
  ).meta(ADVANCED),
  REDIS_SENTINEL_PASSWORD: optionalString(
    "the sentinels' own password (their requirepass), where they have one",
    '(none)',
  ).meta(ADVANCED),
  REDIS_TLS_CA: optionalString(
    [
      "a CA file (PEM) that signed the Redis server's certificate, for a rediss:// REDIS_URL",
      "for servers whose certificate no public CA signed; without it, Node's own list of public CAs is trusted",
    ],
    '(public CAs)',
  ).meta(ADVANCED),
  // Tests use their own prefix to stay isolated; deployments sharing a Redis use one each.
  QUEUE_PREFIX: setting(
    z
      .string()
      .regex(/^[A-Za-z0-9_.-]+$/, 'letters, digits, "_", "." and "-" only')
      .default('tserve'),
    'key prefix of every queue and key (several deployments can share a Redis)',
  ),
  LOG_LEVEL: setting(z.enum(LOG_LEVELS).default('info'), 'pino log level'),
  LOG_FORMAT: setting(
    z.enum(LOG_FORMATS).default('auto'),
    'json: a JSON object per line; pretty: readable lines; auto: pretty where stdout is a terminal',
  ).meta(ADVANCED),
  // The one liveness period: the others are derived from it, so that faster failover is one setting.
  HEARTBEAT_MS: int(1000, 50, [
    'how often a worker announces itself; the failover settings follow it',
    'WORKER_TTL_MS, JOB_LOCK_MS, STALLED_INTERVAL_MS and REGISTRY_REFRESH_MS follow it, so it sets how soon a dead worker is noticed and its jobs run again: shorter fails over sooner and costs Redis more commands',
  ]).meta(ADVANCED),
  WORKER_TTL_MS: derived(100, '5 × HEARTBEAT_MS', 'a worker silent this long counts as gone; above HEARTBEAT_MS'),
  LOAD_FAILURE_TTL_MS: int(600_000, 0, 'how long a model whose worker failed to load it is reported as failed').meta(
    ADVANCED,
  ),
};
