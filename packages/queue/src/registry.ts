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

export interface LoadFailure {
  model: string;
  reason: string;
  at: number;
}

/** A worker that cannot load its model leaves the reason behind before it exits. */
export async function reportLoadFailure(redis: Redis, prefix: string, failure: LoadFailure): Promise<void> {
  await redis.hset(keys.loadFailures(prefix), failure.model, JSON.stringify(failure));
}

/** A worker that loaded the model clears any earlier failure for it. */
export async function clearLoadFailure(redis: Redis, prefix: string, model: string): Promise<void> {
  await redis.hdel(keys.loadFailures(prefix), model);
}

/** How long loading the model took, so that gateways can tell clients how long a later load may take. */
export async function recordLoadTime(redis: Redis, prefix: string, model: string, ms: number): Promise<void> {
  await redis.hset(keys.loadTimes(prefix), model, String(Math.round(ms)));
}

export async function listLoadTimes(redis: Redis, prefix: string): Promise<Map<string, number>> {
  const all = await redis.hgetall(keys.loadTimes(prefix));
  return new Map(Object.entries(all).map(([model, ms]) => [model, Number(ms)]));
}

/** Failures newer than `maxAgeMs`: an old one is about a deployment that has probably moved on. */
export async function listLoadFailures(redis: Redis, prefix: string, maxAgeMs: number, now = Date.now()): Promise<LoadFailure[]> {
  const all = await redis.hgetall(keys.loadFailures(prefix));
  return Object.values(all)
    .map((v) => JSON.parse(v) as LoadFailure)
    .filter((f) => now - f.at <= maxAgeMs);
}

/**
 * Each gateway reports its outstanding requests per model and reads the others', so that load
 * shedding sees the whole cluster's depth. One round trip per refresh, none per request. A report
 * older than `staleMs` is from a gateway that stopped, and is ignored.
 */
export async function exchangeDepths(
  redis: Redis,
  prefix: string,
  gatewayId: string,
  mine: Map<string, number>,
  staleMs: number,
  now = Date.now(),
): Promise<Map<string, number>> {
  const models = [...mine.keys()];
  if (models.length === 0) return new Map();
  const pipeline = redis.pipeline();
  for (const model of models) {
    pipeline.hset(keys.depth(prefix, model), gatewayId, `${mine.get(model)}@${now}`);
    pipeline.pexpire(keys.depth(prefix, model), staleMs);
    pipeline.hgetall(keys.depth(prefix, model));
  }
  const replies = await pipeline.exec();
  const peers = new Map<string, number>();
  models.forEach((model, i) => {
    const [err, all] = replies?.[i * 3 + 2] ?? [];
    if (err) throw err;
    let sum = 0;
    for (const [id, value] of Object.entries((all ?? {}) as Record<string, string>)) {
      const [count, at] = value.split('@').map(Number);
      if (id !== gatewayId && now - at <= staleMs && Number.isFinite(count)) sum += count;
    }
    peers.set(model, sum);
  });
  return peers;
}
