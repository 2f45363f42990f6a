import CircuitBreaker from 'opossum';
import type { Logger } from 'pino';
import { ApiError } from '@tserve/contract';
import type { GatewayConfig } from '@tserve/config';
import { describeRedisCause, redisCauseOf, type RedisCause } from '@tserve/queue';

export type BreakerState = 'closed' | 'open' | 'half-open';

export interface RedisBreaker {
  guard<T>(call: () => Promise<T>): Promise<T>;
  state(): BreakerState;
  /** The 503 to answer while the breaker is open (retry once it may have closed); undefined otherwise. */
  refusal(): ApiError | undefined;
  /** What the last failed call said of Redis, while the breaker is not closed; undefined otherwise. */
  cause(): string | undefined;
  /**
   * The connection to Redis is up again (a new primary, after a failover): an open breaker closes
   * now, instead of refusing requests until its next probe. A Redis that still fails reopens it.
   */
  reconnected(): void;
}

/**
 * Failures that say Redis as a whole is sick, not that one call was unlucky: it answers nothing
 * within the command timeout (frozen, or swamped), or it refuses writes for want of memory. One of
 * them opens the breaker at once. Counted as a rate instead, they would not open it while Redis is
 * frozen: each one takes a whole timeout, the enqueues of many requests are coalesced into few
 * calls, and the successes before the freeze fill the window, so the rate stays below the threshold
 * while every new request waits out a timeout of its own.
 */
const OPENS_AT_ONCE: ReadonlySet<RedisCause> = new Set(['not-answering', 'out-of-memory']);

/**
 * The circuit breaker on the gateway's one dependency, Redis. It opens on a sustained error rate
 * (after a minimum volume, so one cold failure does not trip it), or at once on a failure that says
 * Redis is sick (OPENS_AT_ONCE); while open, requests are refused at once, naming the cause,
 * instead of each waiting out a dead connection; a half-open probe closes it. Its numbers are not
 * settings: they follow REDIS_COMMAND_TIMEOUT_MS (breakerSettings in packages/config).
 */
export function createRedisBreaker(config: GatewayConfig, logger: Logger): RedisBreaker {
  const breaker = new CircuitBreaker((call: () => Promise<unknown>) => call(), {
    name: 'redis',
    timeout: config.BREAKER_TIMEOUT_MS,
    errorThresholdPercentage: config.BREAKER_ERROR_PERCENT,
    volumeThreshold: config.BREAKER_VOLUME,
    resetTimeout: config.BREAKER_RESET_MS,
    rollingCountTimeout: 10000,
    rollingCountBuckets: 10,
  });
  let lastCause: RedisCause = 'other';
  const failed = (err: unknown) => {
    lastCause = redisCauseOf(err);
    if (OPENS_AT_ONCE.has(lastCause) && !breaker.opened) breaker.open();
  };
  breaker.on('failure', failed);
  breaker.on('timeout', failed);
  const cause = () => describeRedisCause(lastCause);
  breaker.on('open', () =>
    logger.warn({ breaker: 'redis', cause: lastCause }, `circuit breaker opened: refusing requests; ${cause()}`),
  );
  breaker.on('halfOpen', () => logger.info({ breaker: 'redis' }, 'circuit breaker half-open: probing'));
  breaker.on('close', () => logger.info({ breaker: 'redis' }, 'circuit breaker closed'));
  const retryAfterSeconds = Math.ceil(config.BREAKER_RESET_MS / 1000);
  return {
    guard: <T>(call: () => Promise<T>) => breaker.fire(call) as Promise<T>,
    state: () => (breaker.opened ? 'open' : breaker.halfOpen ? 'half-open' : 'closed'),
    refusal: () =>
      breaker.opened
        ? new ApiError(
            'unavailable',
            `the queue is unavailable (circuit breaker open): ${cause()}; retry shortly`,
            retryAfterSeconds,
          )
        : undefined,
    cause: () => (breaker.closed ? undefined : cause()),
    reconnected: () => {
      if (!breaker.closed) breaker.close();
    },
  };
}
