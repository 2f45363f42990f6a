import type { Redis } from 'ioredis';
import { workerInfoSchema, type WorkerInfo } from '@tserve/contract';
import { keys } from './names.js';

/**
 * Worker heartbeats. A worker renews its key every HEARTBEAT_MS with a TTL of WORKER_TTL_MS;
 * Redis expires the key of a worker that died, so no clock comparison between machines is needed.
 */

/**
 * Announces a worker, and keeps its place among its model's ready workers: a sorted set scored by
 * when each one's announcement lapses, on Redis's clock, so that counting a model's ready workers
 * costs one call however many workers the cluster has (reading every announcement would cost each
 * worker's beat a read of all of them).
 */
const ANNOUNCE = `
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if ARGV[4] == '1' then redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[1]) else redis.call('ZREM', KEYS[3], ARGV[1]) end
-- The set lives as long as its latest member; an announcement with a shorter TTL must not cut it.
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[3], last[2]) end
return redis.call('ZCARD', KEYS[3])`;

/** Announces a worker for `ttlMs`; answers how many ready workers its model has, itself included if ready. */
export async function announceWorker(redis: Redis, prefix: string, info: WorkerInfo, ttlMs: number): Promise<number> {
  const ready = info.state === 'ready' ? '1' : '0';
  const keyArgs = [keys.workers(prefix), keys.worker(prefix, info.id), keys.readyWorkers(prefix, info.model)];
  return Number(await redis.eval(ANNOUNCE, keyArgs.length, ...keyArgs, info.id, JSON.stringify(info), ttlMs, ready));
}

export async function withdrawWorker(redis: Redis, prefix: string, info: WorkerInfo): Promise<void> {
  await redis
    .multi()
    .srem(keys.workers(prefix), info.id)
    .del(keys.worker(prefix, info.id))
    .zrem(keys.readyWorkers(prefix, info.model), info.id)
    .exec();
}

/** Every live worker's announcement; one that is not an announcement at all (another program's key) is left out. */
export async function listLiveWorkers(redis: Redis, prefix: string): Promise<WorkerInfo[]> {
  const ids = await redis.smembers(keys.workers(prefix));
  if (ids.length === 0) return [];
  const values = await redis.mget(ids.map((id) => keys.worker(prefix, id)));
  const live: WorkerInfo[] = [];
  const gone: string[] = [];
  values.forEach((value, i) => {
    if (value === null) {
      gone.push(ids[i]);
      return;
    }
    const info = workerInfoSchema.safeParse(parseOrNull(value));
    if (info.success) live.push(info.data);
  });
  if (gone.length) await redis.srem(keys.workers(prefix), ...gone);
  return live;
}

function parseOrNull(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}
