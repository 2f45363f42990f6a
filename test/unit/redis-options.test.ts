/**
 * Issue 87: what each connection makes of the Redis settings (packages/queue's redisOptions): a
 * single server at REDIS_URL, or the sentinels with REDIS_URL's user, password, database and TLS.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadGatewayConfig } from '@tserve/config';
import { describeTarget, redisCauseOf, redisOptions, RedisSettingsError } from '@tserve/queue';

describe('Redis connection options', () => {
  it('reads a single server, its ACL user, password and database from REDIS_URL', () => {
    const options = redisOptions('redis://app:p%40ss%2Fword@redis.internal:6380/3');
    assert.equal(options.host, 'redis.internal');
    assert.equal(options.port, 6380);
    assert.equal(options.username, 'app');
    assert.equal(options.password, 'p@ss/word', 'percent-encoded as a URL must be');
    assert.equal(options.db, 3);
    assert.equal(options.tls, undefined);
    assert.equal(options.sentinels, undefined);
    const bare = redisOptions('redis://127.0.0.1');
    assert.deepEqual([bare.port, bare.username, bare.password, bare.db], [6379, undefined, undefined, 0]);
    assert.equal(redisOptions('redis://:secret@[::1]:6379').host, '::1');
  });

  it('speaks TLS for rediss://, trusting REDIS_TLS_CA where given', () => {
    assert.deepEqual(redisOptions('rediss://redis.example.com:6380').tls, {});
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-ca-'));
    try {
      const ca = path.join(dir, 'ca.pem');
      fs.writeFileSync(ca, '-----BEGIN CERTIFICATE-----\n');
      const config = loadGatewayConfig({ REDIS_URL: 'rediss://u:p@redis:6380', REDIS_TLS_CA: ca });
      assert.deepEqual(redisOptions(config).tls, { ca: fs.readFileSync(ca) });
      assert.throws(
        () => redisOptions({ ...config, REDIS_TLS_CA: path.join(dir, 'missing.pem') }),
        (err: unknown) =>
          err instanceof RedisSettingsError && /REDIS_TLS_CA: cannot read .*missing\.pem \(ENOENT\)/.test(err.message),
      );
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it("asks the sentinels for the primary, with REDIS_URL's credentials and database and not its host", () => {
    const config = loadGatewayConfig({
      REDIS_URL: 'rediss://app:secret@ignored:1/2',
      REDIS_SENTINELS: 's1:26379,s2:26380',
      REDIS_SENTINEL_MASTER: 'main',
      REDIS_SENTINEL_PASSWORD: 'sentinel-secret',
    });
    const options = redisOptions(config);
    assert.deepEqual(options.sentinels, [
      { host: 's1', port: 26379 },
      { host: 's2', port: 26380 },
    ]);
    assert.equal(options.name, 'main');
    assert.equal(options.role, 'master');
    assert.equal(options.sentinelPassword, 'sentinel-secret');
    assert.deepEqual([options.username, options.password, options.db], ['app', 'secret', 2]);
    assert.equal(options.host, undefined, "REDIS_URL's host is not used");
    assert.deepEqual(options.tls, {});
    assert.equal(options.enableTLSForSentinelMode, true, 'TLS to the primary the sentinels name');
    assert.deepEqual(options.sentinelTLS, {});
    assert.equal(options.failoverDetector, true, 'told of a failover by the sentinels');
  });

  it('calls a primary lost or failing over unreachable, whatever ioredis says of it', () => {
    for (const message of [
      'Reached the max retries per request limit (which is 1). Refer to "maxRetriesPerRequest" option for details.',
      'All sentinels are unreachable. Retrying from scratch after 10ms.',
      "READONLY You can't write against a read only replica.",
      "Stream isn't writeable and enableOfflineQueue options is false",
    ])
      assert.equal(redisCauseOf(new Error(message)), 'unreachable', message);
  });

  it('names where it connects without the password', () => {
    assert.equal(describeTarget('redis://app:secret@redis:6379/1'), 'REDIS_URL=redis://app:***@redis:6379/1');
    const config = loadGatewayConfig({ REDIS_SENTINELS: 's1,s2:1', REDIS_SENTINEL_MASTER: 'main' });
    assert.equal(describeTarget(config), 'primary "main" of REDIS_SENTINELS=s1:26379,s2:1');
  });
});
