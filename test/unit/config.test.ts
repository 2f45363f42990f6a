import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import {
  ConfigError,
  formatHelp,
  formatSettingsMarkdown,
  isAdvanced,
  loadGatewayConfig,
  loadLauncherConfig,
  loadWorkerConfig,
  SETTINGS,
  settingHelp,
} from '@tserve/config';

const CONFIGURATION_DOC = fs.readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8');

describe('settings', () => {
  it('fills in defaults, coerces numbers and booleans, and trims optional strings', () => {
    const gateway = loadGatewayConfig({ PORT: '9000', DASHBOARD_READONLY: 'yes', DEFAULT_MODEL: '  ' });
    assert.equal(gateway.PORT, 9000);
    assert.equal(gateway.DASHBOARD_READONLY, true);
    assert.equal(gateway.DEFAULT_MODEL, undefined);
    assert.equal(gateway.MAX_QUEUE_DEPTH, 1000);
    assert.equal(gateway.REDIS_URL, 'redis://127.0.0.1:6379');
    assert.equal(loadGatewayConfig({ DASHBOARD_READONLY: 'off' }).DASHBOARD_READONLY, false);
  });

  it("fills the worker's batch limits by device unless set", () => {
    const cpu = loadWorkerConfig({ MODEL: 'm' });
    assert.deepEqual([cpu.BATCH_MAX_SIZE, cpu.BATCH_MAX_TOKENS], [32, 16384]);
    const gpu = loadWorkerConfig({ MODEL: 'm', DEVICE: 'gpu' });
    assert.deepEqual([gpu.BATCH_MAX_SIZE, gpu.BATCH_MAX_TOKENS], [128, 65536]);
    assert.equal(loadWorkerConfig({ MODEL: 'm', DEVICE: 'gpu', BATCH_MAX_SIZE: '7' }).BATCH_MAX_SIZE, 7);
  });

  it('derives the liveness periods from HEARTBEAT_MS, unless each is set', () => {
    const periods = (env: Record<string, string>) => {
      const worker = loadWorkerConfig({ MODEL: 'm', ...env });
      const gateway = loadGatewayConfig(env);
      assert.equal(gateway.WORKER_TTL_MS, worker.WORKER_TTL_MS);
      return [worker.WORKER_TTL_MS, worker.JOB_LOCK_MS, worker.STALLED_INTERVAL_MS, gateway.REGISTRY_REFRESH_MS];
    };
    // The defaults they had as settings of their own.
    assert.deepEqual(periods({}), [5000, 5000, 5000, 250]);
    assert.deepEqual(periods({ HEARTBEAT_MS: '200' }), [1000, 1000, 1000, 50]);
    assert.deepEqual(periods({ HEARTBEAT_MS: '4000' }), [20_000, 20_000, 20_000, 1000]);
    // Floors: a lock renewed every half of it, and a registry read, stay sane at the shortest beat.
    assert.deepEqual(periods({ HEARTBEAT_MS: '50' }), [250, 500, 250, 20]);
    // Set, each wins alone (the tests shorten them that way).
    assert.deepEqual(
      periods({
        HEARTBEAT_MS: '200',
        WORKER_TTL_MS: '1500',
        JOB_LOCK_MS: '2000',
        STALLED_INTERVAL_MS: '700',
        REGISTRY_REFRESH_MS: '100',
      }),
      [1500, 2000, 700, 100],
    );
    assert.deepEqual(periods({ JOB_LOCK_MS: '1500' }), [5000, 1500, 5000, 250]);
    assert.equal(loadLauncherConfig({ HEARTBEAT_MS: '300' }).WORKER_TTL_MS, 1500);
  });

  it('refuses a WORKER_TTL_MS that a worker would outlive between two beats', () => {
    for (const load of [
      () => loadWorkerConfig({ MODEL: 'm', HEARTBEAT_MS: '2000', WORKER_TTL_MS: '2000' }),
      () => loadGatewayConfig({ WORKER_TTL_MS: '900' }),
    ]) {
      assert.throws(
        load,
        (err: unknown) => err instanceof ConfigError && /WORKER_TTL_MS: \d+ must exceed HEARTBEAT_MS/.test(err.message),
      );
    }
  });

  it('derives the HTTP timeouts from REQUEST_TIMEOUT_MS, at least a second each, unless each is set', () => {
    const timeouts = (env: Record<string, string>) => {
      const c = loadGatewayConfig(env);
      return [c.HTTP_HEADERS_TIMEOUT_MS, c.HTTP_REQUEST_TIMEOUT_MS, c.HTTP_SEND_TIMEOUT_MS];
    };
    assert.deepEqual(timeouts({}), [10_000, 30_000, 30_000]);
    assert.deepEqual(timeouts({ REQUEST_TIMEOUT_MS: '120000' }), [40_000, 120_000, 120_000]);
    assert.deepEqual(timeouts({ REQUEST_TIMEOUT_MS: '2000' }), [1000, 2000, 2000]);
    assert.deepEqual(timeouts({ REQUEST_TIMEOUT_MS: '300' }), [1000, 1000, 1000]);
    assert.deepEqual(timeouts({ REQUEST_TIMEOUT_MS: '120000', HTTP_SEND_TIMEOUT_MS: '1000' }), [40_000, 120_000, 1000]);
  });

  it('derives the circuit breaker from REDIS_COMMAND_TIMEOUT_MS; its numbers are not settings', () => {
    const breaker = (env: Record<string, string>) => {
      const c = loadGatewayConfig(env);
      return [c.BREAKER_TIMEOUT_MS, c.BREAKER_RESET_MS, c.BREAKER_ERROR_PERCENT, c.BREAKER_VOLUME];
    };
    assert.deepEqual(breaker({}), [2000, 5000, 50, 10]);
    assert.deepEqual(breaker({ REDIS_COMMAND_TIMEOUT_MS: '500' }), [500, 1250, 50, 10]);
    assert.deepEqual(breaker({ REDIS_COMMAND_TIMEOUT_MS: '30000' }), [30_000, 75_000, 50, 10]);
    // An open breaker never probes more often than once a second.
    assert.deepEqual(breaker({ REDIS_COMMAND_TIMEOUT_MS: '100' }), [100, 1000, 50, 10]);
    assert.deepEqual(
      breaker({ BREAKER_VOLUME: '5', BREAKER_RESET_MS: '1', BREAKER_TIMEOUT_MS: '1', BREAKER_ERROR_PERCENT: '1' }),
      [2000, 5000, 50, 10],
    );
    for (const shape of Object.values(SETTINGS))
      assert.ok(!Object.keys(shape).some((name) => name.startsWith('BREAKER_')));
  });

  it('takes an empty value as unset: the default, or the derivation', () => {
    const gateway = loadGatewayConfig({
      RESULT_POLL_MS: '',
      HTTP_SEND_TIMEOUT_MS: ' ',
      REQUEST_TIMEOUT_MS: '60000',
      REDIS_URL: '',
    });
    assert.equal(gateway.RESULT_POLL_MS, 1000);
    assert.equal(gateway.HTTP_SEND_TIMEOUT_MS, 60_000);
    assert.equal(gateway.REDIS_URL, 'redis://127.0.0.1:6379');
    assert.equal(loadWorkerConfig({ MODEL: 'm', JOB_LOCK_MS: '', HEARTBEAT_MS: '400' }).JOB_LOCK_MS, 2000);
  });

  it('refuses a bad value with a message naming the setting', () => {
    const refusal = (load: () => unknown, pattern: RegExp) =>
      assert.throws(load, (err: unknown) => err instanceof ConfigError && pattern.test(err.message));
    refusal(() => loadGatewayConfig({ PORT: 'eighty' }), /PORT:/);
    refusal(() => loadGatewayConfig({ BATCH_QUEUE_SHARE: '2' }), /BATCH_QUEUE_SHARE:/);
    refusal(() => loadGatewayConfig({ DASHBOARD_READONLY: 'maybe' }), /DASHBOARD_READONLY:/);
    refusal(() => loadGatewayConfig({ QUEUE_PREFIX: 'a b' }), /QUEUE_PREFIX: letters, digits/);
    refusal(() => loadWorkerConfig({}), /MODEL: MODEL is required/);
    refusal(() => loadWorkerConfig({ MODEL: 'm', DEVICE: 'tpu' }), /DEVICE:/);
    refusal(() => loadLauncherConfig({ MODEL: ' , ' }), /MODEL: name at least one model/);
    refusal(() => loadGatewayConfig({ REDIS_URL: 'http://redis:6379' }), /REDIS_URL: a redis:\/\/ or rediss:\/\//);
    refusal(
      () => loadWorkerConfig({ MODEL: 'm', REDIS_SENTINELS: 'a:26379,b:x' }),
      /REDIS_SENTINELS: "b:x" is not host:port/,
    );
    refusal(() => loadGatewayConfig({ REDIS_SENTINELS: 'a:70000' }), /REDIS_SENTINELS: "a:70000"/);
  });

  it('reads the sentinels as host:port, the port 26379 where left out', () => {
    assert.deepEqual(loadGatewayConfig({}).REDIS_SENTINELS, []);
    const config = loadGatewayConfig({
      REDIS_SENTINELS: ' s1.redis:26380, 10.0.0.2 ,[::1]:5000 ',
      REDIS_SENTINEL_MASTER: 'main',
    });
    assert.deepEqual(config.REDIS_SENTINELS, [
      { host: 's1.redis', port: 26380 },
      { host: '10.0.0.2', port: 26379 },
      { host: '::1', port: 5000 },
    ]);
    assert.equal(config.REDIS_SENTINEL_MASTER, 'main');
    assert.equal(loadWorkerConfig({ MODEL: 'm' }).REDIS_SENTINEL_MASTER, 'mymaster');
  });

  it("reads the launcher's comma-separated model list", () => {
    assert.deepEqual(loadLauncherConfig({ MODEL: 'a, b,,c' }).models, ['a', 'b', 'c']);
    assert.deepEqual(loadLauncherConfig({}).models, ['replica/MiniLM-L6-H384-uncased-sst2']);
  });

  it("generates each program's --help from the declarations: every setting, its default and description, once", () => {
    const help = formatHelp('gateway', ['gateway', 'common']);
    for (const section of ['gateway', 'common'] as const) {
      for (const [name, schema] of Object.entries(SETTINGS[section])) {
        const [, shown, description] = settingHelp(name, schema);
        assert.match(
          help,
          new RegExp(
            `^  ${name} +${shown.replace(/[().*+?[\]|/]/g, '\\$&')} +${description.replace(/[().*+?[\]|/]/g, '\\$&')}$`,
            'm',
          ),
          name,
        );
      }
    }
    assert.doesNotMatch(help, /BATCH_MAX_SIZE/);
    const launcher = formatHelp('launcher', ['launcher', 'gateway', 'worker', 'common']);
    // MODEL belongs to the launcher and the worker: printed once, with the launcher's meaning.
    assert.equal(launcher.match(/^ {2}MODEL /gm)?.length, 1);
    assert.match(launcher, /^ {2}MODEL +replica\/MiniLM-L6-H384-uncased-sst2 +model ids, comma-separated/m);
    assert.match(formatHelp('worker', ['worker', 'common']), /^ {2}BATCH_MAX_SIZE +32 cpu \/ 128 gpu +most sequences/m);
  });

  it('lists the user settings first and the advanced ones after, under their own heading; every derived setting is advanced', () => {
    const launcher = formatHelp('launcher', ['launcher', 'gateway', 'worker', 'common']);
    const [user, advanced] = launcher.split(/^Advanced settings \(.*\):$/m);
    assert.ok(advanced, launcher);
    const names = (text: string) => [...text.matchAll(/^ {2}([A-Z][A-Z0-9_]*) /gm)].map((m) => m[1]);
    const all = Object.values(SETTINGS).flatMap((shape) => Object.entries(shape));
    const expected = (tier: boolean) =>
      new Set(all.filter(([, schema]) => isAdvanced(schema) === tier).map(([name]) => name));
    assert.deepEqual(new Set(names(user)), expected(false));
    assert.deepEqual(new Set(names(advanced)), expected(true));
    for (const name of [
      'MODEL',
      'DEVICE',
      'DTYPE',
      'PORT',
      'REQUEST_TIMEOUT_MS',
      'MAX_QUEUE_DEPTH',
      'API_KEYS',
      'BATCH_MAX_SIZE',
      'WORKERS',
    ])
      assert.ok(expected(false).has(name), name);
    // Few decisions for a user; the rest are knobs. A new setting is advanced unless a user must decide it.
    assert.ok(expected(false).size <= 30, `${expected(false).size} user settings`);
    for (const [name, schema] of all) {
      const [, shown, description] = settingHelp(name, schema);
      if (/derived unless set/.test(description)) {
        assert.ok(isAdvanced(schema), `${name} is derived, so advanced`);
        assert.match(shown, /[A-Z]+_[A-Z_]+/, `${name}'s default names the setting it is derived from`);
      }
    }
    assert.match(formatSettingsMarkdown(), /^## User settings\n[^]*^## Advanced settings\n/m);
  });

  it('says each setting in one line of --help, and leaves the rest to docs/configuration.md', () => {
    const all = Object.values(SETTINGS).flatMap((shape) => Object.entries(shape));
    for (const [name, schema] of all) {
      const [, shown, description] = settingHelp(name, schema);
      assert.ok(description.length <= 100, `${name}'s help is ${description.length} characters: ${description}`);
      assert.ok(shown.length <= 40, `${name}'s default is ${shown.length} characters as shown: ${shown}`);
    }
    // What a line leaves out is in the docs, after it.
    assert.match(
      formatSettingsMarkdown(),
      /^\| `WORKER_MEMORY_MB` \| [^|]+ \| the most memory \(peak RSS, MiB\)[^|]*<br>a quarter under its container's limit;/m,
    );
    const help = formatHelp('worker', ['worker', 'common']);
    assert.match(
      help,
      /^ {2}WORKER_MEMORY_MB .*the most memory \(peak RSS, MiB\) the worker process may hold \(docs\/memory\.md\)$/m,
    );
    assert.doesNotMatch(help, /lowers BATCH_MAX_TOKENS/);
  });

  it("keeps docs/configuration.md's settings tables as generated from the declarations (npm run docs:settings)", () => {
    const start = '<!-- settings: generated from packages/config by npm run docs:settings -->';
    const block = CONFIGURATION_DOC.slice(
      CONFIGURATION_DOC.indexOf(start) + start.length,
      CONFIGURATION_DOC.indexOf('<!-- /settings -->'),
    ).trim();
    assert.equal(
      block,
      formatSettingsMarkdown(),
      'docs/configuration.md differs from packages/config: run npm run docs:settings',
    );
    for (const shape of Object.values(SETTINGS))
      for (const name of Object.keys(shape)) assert.ok(block.includes(`| \`${name}\` |`), name);
  });
});
