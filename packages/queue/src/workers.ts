import type { Redis } from 'ioredis';
import type { WorkerInfo } from '@tserve/contract';
import { keys } from './names.js';

/**
 * Worker heartbeats. A worker renews its key every HEARTBEAT_MS with a TTL of WORKER_TTL_MS;
 * Redis expires the key of a worker that died, so no clock comparison between machines is needed.
 */

export async function announceWorker(redis: Redis, prefix: string, info: WorkerInfo, ttlMs: number): Promise<void> {
  await redis.multi().sadd(keys.workers(prefix), info.id).set(keys.worker(prefix, info.id), JSON.stringify(info), 'PX', ttlMs).exec();
}

export async function withdrawWorker(redis: Redis, prefix: string, id: string): Promise<void> {
  await redis.multi().srem(keys.workers(prefix), id).del(keys.worker(prefix, id)).exec();
}

export async function listLiveWorkers(redis: Redis, prefix: string): Promise<WorkerInfo[]> {
  const ids = await redis.smembers(keys.workers(prefix));
  if (ids.length === 0) return [];
  const values = await redis.mget(ids.map((id) => keys.worker(prefix, id)));
  const live: WorkerInfo[] = [];
  const gone: string[] = [];
  values.forEach((value, i) => {
    if (value === null) gone.push(ids[i]);
    else live.push(JSON.parse(value) as WorkerInfo);
  });
  if (gone.length) await redis.srem(keys.workers(prefix), ...gone);
  return live;
}
