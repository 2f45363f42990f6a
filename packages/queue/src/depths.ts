import type { Redis } from 'ioredis';
import { keys } from './names.js';

/**
 * Each gateway reports its outstanding requests per model and reads the others', so that load
 * shedding sees the whole cluster's depth. One round trip per refresh, none per request. A report
 * older than `staleMs` is from a gateway that stopped: it is ignored and removed. Each restart is a
 * gateway with a new id, so otherwise the hash, and every read of it, would grow with every gateway
 * that ever ran. (A live gateway that was only slow writes its report again at its next refresh.)
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
  const prune = redis.pipeline();
  models.forEach((model, i) => {
    const [err, all] = replies?.[i * 3 + 2] ?? [];
    if (err) throw err;
    let sum = 0;
    const stale: string[] = [];
    for (const [id, value] of Object.entries((all ?? {}) as Record<string, string>)) {
      if (id === gatewayId) continue;
      const [count, at] = value.split('@').map(Number);
      if (now - at <= staleMs && Number.isFinite(count)) sum += count;
      else stale.push(id);
    }
    if (stale.length) prune.hdel(keys.depth(prefix, model), ...stale);
    peers.set(model, sum);
  });
  if (prune.length) await prune.exec().catch(() => {});
  return peers;
}
