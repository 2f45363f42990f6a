import { z } from 'zod';
import { ADVANCED, derived, int, setting } from '../setting.js';

/** The settings every program reads: Redis, logging, and how soon a worker counts as gone. */

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;

export const commonShape = {
  REDIS_URL: setting(z.string().url().default('redis://127.0.0.1:6379'), 'Redis holding the queues'),
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
