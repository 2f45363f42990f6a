import type { Redis } from 'ioredis';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { ApiError } from '@tserve/contract';
import type { ApiKey } from './api-keys.js';

/** What a caller learns of its quota; sent as the IETF draft's RateLimit-* headers. */
export interface QuotaState {
  limit: number;
  remaining: number;
  /** Seconds until the window resets. */
  resetSeconds: number;
  /** RateLimit-Policy: `<requests>;w=<seconds>`. */
  policy: string;
}

export type QuotaReason = 'rate' | 'concurrency';

export class QuotaExceeded extends ApiError {
  constructor(
    readonly reason: QuotaReason,
    message: string,
    retryAfterSeconds: number,
    readonly state?: QuotaState,
  ) {
    super('rate_limited', message, retryAfterSeconds);
  }
}

/**
 * Takes a slot in a key's set of requests in flight, unless it is full. Each member expires at its
 * request's deadline, so slots held by a gateway that died free themselves.
 */
const TAKE_SLOT = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return 1`;

/**
 * Per-key quotas kept in Redis, so every gateway replica draws on the same budget: a request rate
 * (rate-limiter-flexible's fixed window) and a number of requests in flight. Keys without limits
 * cost nothing here.
 */
export class Quotas {
  private readonly limiters = new Map<string, { limiter: RateLimiterRedis; signature: string }>();

  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  /**
   * Admits a request of `key` or throws QuotaExceeded. Resolves with the rate state (for headers)
   * and a release to call when the request is over.
   */
  async admit(key: ApiKey, requestId: string, deadline: number): Promise<{ state?: QuotaState; release: () => void }> {
    let state: QuotaState | undefined;
    if (key.rate) {
      const { requests, per_seconds } = key.rate;
      const policy = `${requests};w=${per_seconds}`;
      try {
        const res = await this.limiter(key).consume(key.id);
        state = {
          limit: requests,
          remaining: res.remainingPoints,
          resetSeconds: Math.ceil(res.msBeforeNext / 1000),
          policy,
        };
      } catch (err) {
        if (!(err instanceof RateLimiterRes)) throw err;
        const reset = Math.max(1, Math.ceil(err.msBeforeNext / 1000));
        throw new QuotaExceeded(
          'rate',
          `API key ${key.name} is over its rate of ${requests} requests per ${per_seconds} s; retry in ${reset} s`,
          reset,
          {
            limit: requests,
            remaining: 0,
            resetSeconds: reset,
            policy,
          },
        );
      }
    }
    if (!key.concurrency) return { state, release: () => {} };
    const slots = `${this.prefix}:inflight:${key.id}`;
    const taken = await this.redis.eval(TAKE_SLOT, 1, slots, Date.now(), key.concurrency, deadline, requestId);
    if (Number(taken) !== 1) {
      throw new QuotaExceeded(
        'concurrency',
        `API key ${key.name} already has ${key.concurrency} requests in flight, its limit; retry when one is answered`,
        1,
        state,
      );
    }
    return { state, release: () => void this.redis.zrem(slots, requestId).catch(() => {}) };
  }

  private limiter(key: ApiKey): RateLimiterRedis {
    const signature = `${key.rate!.requests}/${key.rate!.per_seconds}`;
    const known = this.limiters.get(key.id);
    if (known?.signature === signature) return known.limiter;
    // A reloaded key file may change a key's rate: a new limiter, under a key of its own.
    const limiter = new RateLimiterRedis({
      storeClient: this.redis,
      keyPrefix: `${this.prefix}:rate:${signature}`,
      points: key.rate!.requests,
      duration: key.rate!.per_seconds,
    });
    this.limiters.set(key.id, { limiter, signature });
    return limiter;
  }
}
