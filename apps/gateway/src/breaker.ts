import CircuitBreaker from 'opossum';
import type { Logger } from 'pino';
import { ApiError } from '@tserve/contract';
import type { GatewayConfig } from '@tserve/config';

export type BreakerState = 'closed' | 'open' | 'half-open';

export interface RedisBreaker {
  guard<T>(call: () => Promise<T>): Promise<T>;
  state(): BreakerState;
  /** The 503 to answer while the breaker is open (retry once it may have closed); undefined otherwise. */
  refusal(): ApiError | undefined;
}

/**
 * The circuit breaker on the gateway's one dependency, Redis. It opens on a sustained error rate
 * (after a minimum volume, so one cold failure does not trip it); while open, requests are
 * refused at once instead of each waiting out a dead connection; a half-open probe closes it. Its
 * numbers are not settings: they follow REDIS_COMMAND_TIMEOUT_MS (breakerSettings in
 * packages/config).
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
  breaker.on('open', () => logger.warn({ breaker: 'redis' }, 'circuit breaker opened: refusing requests'));
  breaker.on('halfOpen', () => logger.info({ breaker: 'redis' }, 'circuit breaker half-open: probing'));
  breaker.on('close', () => logger.info({ breaker: 'redis' }, 'circuit breaker closed'));
  const retryAfterSeconds = Math.ceil(config.BREAKER_RESET_MS / 1000);
  return {
    guard: <T>(call: () => Promise<T>) => breaker.fire(call) as Promise<T>,
    state: () => (breaker.opened ? 'open' : breaker.halfOpen ? 'half-open' : 'closed'),
    refusal: () =>
      breaker.opened
        ? new ApiError('unavailable', 'the queue is unavailable (circuit breaker open after repeated Redis failures); retry shortly', retryAfterSeconds)
        : undefined,
  };
}
