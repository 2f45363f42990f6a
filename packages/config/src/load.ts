import { z } from 'zod';
import { commonShape } from './settings/common.js';
import { gatewayShape } from './settings/gateway.js';
import { launcherShape } from './settings/launcher.js';
import { DEVICES, workerShape } from './settings/worker.js';

/**
 * Each program's config from the environment: its settings parsed, then the defaults that depend
 * on the device or on other settings filled in. A bad value stops the program with a message naming
 * the variable.
 */

type Env = Record<string, string | undefined>;

const workerSchema = z.object({ ...commonShape, ...workerShape });
const gatewaySchema = z.object({ ...commonShape, ...gatewayShape });
const launcherSchema = z.object({ ...commonShape, ...launcherShape });

/** A loader's result: the settings in `K`, optional in the schema, filled in (by device, or derived from other settings). */
type Filled<T, K extends keyof T> = Omit<T, K> & { [P in K]-?: Exclude<T[P], undefined> };

/** The worker's settings with the device-dependent defaults and the derived periods filled in. */
export type WorkerConfig = Filled<
  z.infer<typeof workerSchema>,
  'BATCH_MAX_SIZE' | 'BATCH_MAX_TOKENS' | 'WORKER_TTL_MS' | 'JOB_LOCK_MS' | 'STALLED_INTERVAL_MS'
>;

/** Batch limits that fit a device: a CPU call costs per sequence, a GPU call mostly a fixed few milliseconds. */
function batchDefaults(device: (typeof DEVICES)[number]): { size: number; tokens: number } {
  return device === 'cpu' ? { size: 32, tokens: 16384 } : { size: 128, tokens: 65536 };
}

/** The Redis circuit breaker's numbers, which are not settings: see breakerSettings. */
type BreakerSettings = {
  BREAKER_TIMEOUT_MS: number;
  BREAKER_RESET_MS: number;
  BREAKER_ERROR_PERCENT: number;
  BREAKER_VOLUME: number;
};

/** The gateway's settings with the derived periods and timeouts, and the circuit breaker's numbers, filled in. */
export type GatewayConfig = Filled<
  z.infer<typeof gatewaySchema>,
  | 'WORKER_TTL_MS'
  | 'REGISTRY_REFRESH_MS'
  | 'HTTP_HEADERS_TIMEOUT_MS'
  | 'HTTP_REQUEST_TIMEOUT_MS'
  | 'HTTP_SEND_TIMEOUT_MS'
  | 'MAX_CONNECTIONS_PER_CLIENT'
> &
  BreakerSettings;
export type LauncherConfig = Filled<z.infer<typeof launcherSchema>, 'WORKER_TTL_MS'> & { models: string[] };

export class ConfigError extends Error {}

function parse<S extends z.ZodType>(schema: S, env: Env): z.infer<S> {
  // An empty value counts as unset, so that a compose file can pass `${NAME:-}` for a setting it
  // leaves to the program: its default, or its derivation.
  const set = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined && value.trim() !== ''));
  const result = schema.safeParse(set);
  if (!result.success) {
    const lines = result.error.issues.map((i) => `  ${i.path.join('.') || '(env)'}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  return result.data;
}

/** `value` rounded, and at least `min`. */
const atLeast = (min: number, value: number) => Math.max(min, Math.round(value));

/**
 * How long a silent worker still counts as live: five heartbeats, so that a few beats late (a
 * long collection, a slow Redis) do not count a busy worker gone and send its work elsewhere.
 */
function workerTtl(config: { HEARTBEAT_MS: number; WORKER_TTL_MS?: number }): number {
  const ttl = config.WORKER_TTL_MS ?? 5 * config.HEARTBEAT_MS;
  if (ttl <= config.HEARTBEAT_MS) {
    throw new ConfigError(
      `invalid configuration:\n  WORKER_TTL_MS: ${ttl} must exceed HEARTBEAT_MS (${config.HEARTBEAT_MS}), or a worker lapses between its beats`,
    );
  }
  return ttl;
}

/**
 * The circuit breaker on Redis, from the one Redis timeout: an enqueue that takes longer than a
 * Redis command may counts as a failure; the breaker opens once half of the calls in its window
 * failed, and not before ten calls, so that one cold failure does not trip it; open, it probes
 * Redis again after two and a half command timeouts (at least a second), long enough that a
 * probe against a Redis still down does not keep the breaker half-open most of the time, and
 * short enough that clients told to retry then (Retry-After) find it closed.
 */
function breakerSettings(redisCommandTimeoutMs: number): BreakerSettings {
  return {
    BREAKER_TIMEOUT_MS: redisCommandTimeoutMs,
    BREAKER_RESET_MS: atLeast(1000, 2.5 * redisCommandTimeoutMs),
    BREAKER_ERROR_PERCENT: 50,
    BREAKER_VOLUME: 10,
  };
}

export function loadWorkerConfig(env: Env = process.env): WorkerConfig {
  const config = parse(workerSchema, env);
  const defaults = batchDefaults(config.DEVICE);
  const beat = config.HEARTBEAT_MS;
  return {
    ...config,
    BATCH_MAX_SIZE: config.BATCH_MAX_SIZE ?? defaults.size,
    BATCH_MAX_TOKENS: config.BATCH_MAX_TOKENS ?? defaults.tokens,
    WORKER_TTL_MS: workerTtl(config),
    // As long as a worker's silence: a dead worker's jobs are free to run again about when the
    // gateways stop counting it. The lock is renewed every half of it, so one renewal may be late.
    JOB_LOCK_MS: config.JOB_LOCK_MS ?? atLeast(500, 5 * beat),
    // Once a lock period: a dead worker's jobs are back in the queue within two lock periods.
    STALLED_INTERVAL_MS: config.STALLED_INTERVAL_MS ?? 5 * beat,
  };
}

export function loadGatewayConfig(env: Env = process.env): GatewayConfig {
  const config = parse(gatewaySchema, env);
  const deadline = config.REQUEST_TIMEOUT_MS;
  return {
    ...config,
    // Vertex AI names the port its container listens on.
    PORT: config.AIP_HTTP_PORT ?? config.PORT,
    WORKER_TTL_MS: workerTtl(config),
    // Several reads a beat: a gateway sees a worker come or go, and the other gateways' depths, well
    // within a heartbeat; each read is a few cheap commands.
    REGISTRY_REFRESH_MS: config.REGISTRY_REFRESH_MS ?? atLeast(20, config.HEARTBEAT_MS / 4),
    // A client gets as long to send its request, and to go on reading its answer, as its request
    // may take to be answered, and a third of that for its headers, which are small: a client slower
    // than that holds a connection for nothing. At least a second each, for clients on slow links.
    HTTP_HEADERS_TIMEOUT_MS: config.HTTP_HEADERS_TIMEOUT_MS ?? atLeast(1000, deadline / 3),
    HTTP_REQUEST_TIMEOUT_MS: config.HTTP_REQUEST_TIMEOUT_MS ?? atLeast(1000, deadline),
    HTTP_SEND_TIMEOUT_MS: config.HTTP_SEND_TIMEOUT_MS ?? atLeast(1000, deadline),
    // A quarter: one address (a runaway client, or one attacker) leaves most connections to the rest.
    MAX_CONNECTIONS_PER_CLIENT: config.MAX_CONNECTIONS_PER_CLIENT ?? atLeast(1, config.MAX_CONNECTIONS / 4),
    ...breakerSettings(config.REDIS_COMMAND_TIMEOUT_MS),
  };
}

export function loadLauncherConfig(env: Env = process.env): LauncherConfig {
  const config = parse(launcherSchema, env);
  const models = config.MODEL.split(',')
    .map((m) => m.trim())
    .filter(Boolean);
  if (models.length === 0) throw new ConfigError('invalid configuration:\n  MODEL: name at least one model');
  return { ...config, WORKER_TTL_MS: workerTtl(config), models };
}
