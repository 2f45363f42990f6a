import type { Redis } from 'ioredis';
import { keys } from './names.js';

/** What workers leave behind about loading their model: why a load failed, and how long a load took. */

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
export async function listLoadFailures(
  redis: Redis,
  prefix: string,
  maxAgeMs: number,
  now = Date.now(),
): Promise<LoadFailure[]> {
  const all = await redis.hgetall(keys.loadFailures(prefix));
  return Object.values(all)
    .map((v) => JSON.parse(v) as LoadFailure)
    .filter((f) => now - f.at <= maxAgeMs);
}
