/**
 * A gateway's Redis connection has no offline queue, so a command sent before it is ready fails at
 * once: the gateway waits for it (bounded) before its first registry refresh, or it would start out
 * refusing every request as if Redis were down.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createRedis, whenReady } from '@tserve/queue';
import { REDIS_URL, freePort } from './helpers/system.ts';

describe('gateway Redis connection at start-up', () => {
  it('refuses a command sent before it is ready, and takes one once whenReady resolves', async () => {
    const early = createRedis(REDIS_URL, 'gateway');
    try {
      await assert.rejects(early.ping(), /writeable|offline queue/i);
    } finally {
      early.disconnect();
    }
    const redis = createRedis(REDIS_URL, 'gateway');
    try {
      await whenReady(redis, 5000);
      assert.equal(await redis.ping(), 'PONG');
    } finally {
      redis.disconnect();
    }
  });

  it('gives up waiting after its bound when nothing answers, instead of holding start-up', async () => {
    const redis = createRedis(`redis://127.0.0.1:${await freePort()}`, 'gateway');
    try {
      await whenReady(redis, 200);
      assert.notEqual(redis.status, 'ready');
    } finally {
      redis.disconnect();
    }
  });
});
