import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import {
  ConfigError,
  formatHelp,
  formatSettingsMarkdown,
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

  it('refuses a bad value with a message naming the setting', () => {
    const refusal = (load: () => unknown, pattern: RegExp) => assert.throws(load, (err: unknown) => err instanceof ConfigError && pattern.test(err.message));
    refusal(() => loadGatewayConfig({ PORT: 'eighty' }), /PORT:/);
    refusal(() => loadGatewayConfig({ BATCH_QUEUE_SHARE: '2' }), /BATCH_QUEUE_SHARE:/);
    refusal(() => loadGatewayConfig({ DASHBOARD_READONLY: 'maybe' }), /DASHBOARD_READONLY:/);
    refusal(() => loadGatewayConfig({ QUEUE_PREFIX: 'a b' }), /QUEUE_PREFIX: letters, digits/);
    refusal(() => loadWorkerConfig({}), /MODEL: MODEL is required/);
    refusal(() => loadWorkerConfig({ MODEL: 'm', DEVICE: 'tpu' }), /DEVICE:/);
    refusal(() => loadLauncherConfig({ MODEL: ' , ' }), /MODEL: name at least one model/);
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
        assert.match(help, new RegExp(`^  ${name} +${shown.replace(/[().*+?[\]|/]/g, '\\$&')} +${description.replace(/[().*+?[\]|/]/g, '\\$&')}$`, 'm'), name);
      }
    }
    assert.doesNotMatch(help, /BATCH_MAX_SIZE/);
    const launcher = formatHelp('launcher', ['launcher', 'gateway', 'worker', 'common']);
    // MODEL belongs to the launcher and the worker: printed once, with the launcher's meaning.
    assert.equal(launcher.match(/^ {2}MODEL /gm)?.length, 1);
    assert.match(launcher, /^ {2}MODEL +replica\/MiniLM-L6-H384-uncased-sst2 +model ids, comma-separated/m);
    assert.match(formatHelp('worker', ['worker', 'common']), /^ {2}BATCH_MAX_SIZE +32 cpu \/ 128 gpu +most sequences/m);
  });

  it("keeps docs/configuration.md's settings tables as generated from the declarations (npm run docs:settings)", () => {
    const start = '<!-- settings: generated from packages/config by npm run docs:settings -->';
    const block = CONFIGURATION_DOC.slice(CONFIGURATION_DOC.indexOf(start) + start.length, CONFIGURATION_DOC.indexOf('<!-- /settings -->')).trim();
    assert.equal(block, formatSettingsMarkdown(), 'docs/configuration.md differs from packages/config: run npm run docs:settings');
    for (const shape of Object.values(SETTINGS)) for (const name of Object.keys(shape)) assert.ok(block.includes(`| \`${name}\` |`), name);
  });
});
