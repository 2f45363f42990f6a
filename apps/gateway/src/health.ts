import express, { type Router } from 'express';
import type { ModelRegistry } from './model-registry.js';
import type { RedisBreaker } from './breaker.js';

/**
 * `/health`: the process answers. `/ready`: it can serve: Redis answers, the breaker is closed, and
 * every model it has seen (and DEFAULT_MODEL) has a live worker, none still loading. 503 says which
 * of these is missing.
 */
export function healthRoutes(registry: ModelRegistry, breaker: RedisBreaker, defaultModel?: string): Router {
  const router = express.Router();
  router.get('/health', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/ready', (_req, res) => {
    const served = registry.served();
    const reasons: string[] = [];
    if (!registry.healthy) reasons.push(`Redis is not answering${registry.lastError ? ` (${registry.lastError})` : ''}`);
    const breakerState = breaker.state();
    if (breakerState === 'open') reasons.push('circuit breaker to Redis is open');
    if (served.length === 0 && registry.loadingAll().length === 0) reasons.push('no live worker serves any model');
    for (const model of registry.lost()) reasons.push(`model ${model} has no live worker`);
    for (const f of registry.failed()) reasons.push(`model ${f.model} is not served: ${f.reason}`);
    for (const m of registry.loadingAll()) reasons.push(`model ${m.id} is loading (about ${m.estimatedSeconds} s)`);
    if (defaultModel && !registry.get(defaultModel) && !registry.lost().includes(defaultModel) && !registry.failure(defaultModel) && !registry.loading(defaultModel)) {
      reasons.push(`default model ${defaultModel} has no live worker`);
    }
    const models = Object.fromEntries<unknown>(
      [...served.map((m) => [m.id, { task: m.task, workers: m.workers.length, queue_depth: m.depth, devices: [...new Set(m.workers.map((w) => `${w.device}/${w.dtype}`))] }] as const),
        ...registry.lost().map((id) => [id, { task: registry.taskOf(id), workers: 0 }] as const),
        ...registry.failed().map((f) => [f.model, { workers: 0, error: f.reason }] as const),
        ...registry.loadingAll().map((m) => [m.id, { workers: 0, loading: true, estimated_time: m.estimatedSeconds }] as const)],
    );
    const body = { status: reasons.length ? 'unavailable' : 'ready', reasons, breaker: breakerState, models };
    if (reasons.length) res.setHeader('Retry-After', '2');
    res.status(reasons.length ? 503 : 200).json(body);
  });
  return router;
}
