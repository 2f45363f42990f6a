/**
 * Loaded by `npm test` (node --import) into the test runner and every test file's process: makes
 * sure the tests have a Redis, so that `npm test` needs Redis installed, not running. It uses
 * TEST_REDIS_URL, else the local default when something answers there, else starts a private
 * redis-server for the whole run and hands its address to the test files as TEST_REDIS_URL.
 */
import { PrivateRedis, redisAnswers } from './helpers/processes.ts';

const LOCAL = 'redis://127.0.0.1:6379';

if (!process.env.TEST_REDIS_URL) {
  if (await redisAnswers(LOCAL, 500)) {
    process.env.TEST_REDIS_URL = LOCAL;
  } else {
    const redis = await PrivateRedis.onFreePort();
    await redis.start().catch(() => {
      throw new Error(
        `the tests need Redis: nothing answers at ${LOCAL} and redis-server could not be started (apt-get install redis-server, or set TEST_REDIS_URL)`,
      );
    });
    redis.detach();
    process.env.TEST_REDIS_URL = redis.url;
  }
}
