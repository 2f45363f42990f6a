import type { Redis } from 'ioredis';
import { ApiError } from '@tserve/contract';

/** A request whose job Redis no longer holds: nothing will answer it, so it is answered now, not at its deadline. */
export const jobLost = () =>
  new ApiError(
    'unavailable',
    'the request was lost with its job: Redis no longer holds it (restarted empty, failed over to a replica that never had it, or evicted it under maxmemory); retry',
    1,
  );

/** A request sent to a Redis that was lost `ms` ago and has not come back within REDIS_FAILOVER_WAIT_MS. */
const redisLost = (ms: number) =>
  new ApiError(
    'unavailable',
    `Redis was lost ${(ms / 1000).toFixed(1)} s ago with this request's job, and has not come back (its primary down, or failing over): its outcome cannot arrive; retry`,
    2,
  );

/**
 * Whether the gateway's connections to Redis are up, and since when they are not: a primary that
 * died, or one failing over to a replica (docs/operations.md, Redis failover). The trips bound how
 * long their requests wait on a lost Redis by it, and look their jobs up again once it is back.
 */
export class RedisLink {
  private since?: number;
  private readonly backs: Array<() => void> = [];

  /** `waitMs`: how long requests sent to Redis wait for it to come back (REDIS_FAILOVER_WAIT_MS). */
  constructor(
    private readonly connections: Array<Pick<Redis, 'on' | 'status'>>,
    private readonly waitMs: number,
  ) {
    for (const connection of connections) {
      connection.on('close', () => (this.since ??= Date.now()));
      connection.on('ready', () => this.ready());
    }
    if (!this.up()) this.since = Date.now();
  }

  /**
   * `up`; `lost` while a connection has been lost for less than the wait; past it, the 503 the
   * requests sent to Redis get, naming how long it has been gone.
   */
  status(now = Date.now()): 'up' | 'lost' | ApiError {
    if (this.since === undefined) return 'up';
    return now - this.since < this.waitMs ? 'lost' : redisLost(now - this.since);
  }

  /** Calls `fn` each time every connection is up again after one was lost. */
  onBack(fn: () => void): void {
    this.backs.push(fn);
  }

  private up(): boolean {
    return this.connections.every((c) => c.status === 'ready');
  }

  private ready(): void {
    if (this.since === undefined || !this.up()) return;
    this.since = undefined;
    for (const fn of this.backs) fn();
  }
}
