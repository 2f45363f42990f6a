import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  KeyStore,
  createKey,
  effectivePriority,
  keyAllows,
  parseKeyFile,
} from '../../apps/gateway/src/admission/api-keys.ts';

// The secret is base64url, which may itself hold '_': it is all after the id.
const secretOf = (token: string): string => token.split('_').slice(2).join('_');

describe('API keys', () => {
  const alice = createKey({ name: 'alice', models: ['*'], priority: 'interactive' });
  const bob = createKey({ name: 'bob', models: ['org/model'], priority: 'batch' });
  const store = new KeyStore([alice.entry, bob.entry]);

  it('stores a hash, never the secret', () => {
    const secret = secretOf(alice.token);
    assert.ok(!JSON.stringify(alice.entry).includes(secret));
    assert.match(alice.entry.hash, /^sha256:[0-9a-f]{64}$/);
  });

  it('verifies a key only with its own secret', () => {
    assert.equal(store.verify(alice.token)?.name, 'alice');
    assert.equal(store.verify(bob.token)?.name, 'bob');
    const aliceId = alice.entry.id;
    const bobSecret = secretOf(bob.token);
    for (const wrong of [
      undefined,
      '',
      'tsk_',
      `tsk_${aliceId}_${bobSecret}`,
      `${alice.token}x`,
      alice.token.replace('tsk_', 'tsx_'),
      `Bearer ${alice.token}`,
    ]) {
      assert.equal(store.verify(wrong), undefined, String(wrong));
    }
  });

  it('limits models and lets a request lower its class, never raise it', () => {
    assert.ok(keyAllows(alice.entry, 'any/model'));
    assert.ok(keyAllows(bob.entry, 'org/model'));
    assert.ok(!keyAllows(bob.entry, 'other/model'));
    assert.equal(effectivePriority('interactive', 'batch'), 'batch');
    assert.equal(effectivePriority('batch', 'interactive'), 'batch');
    assert.equal(effectivePriority('interactive', undefined), 'interactive');
  });

  it('refuses a key file that is not valid, saying where', () => {
    assert.throws(() => parseKeyFile('{', 'keys.json'), /keys\.json is not valid JSON/);
    assert.throws(
      () => parseKeyFile('{"keys":[{"id":"ab","name":"x","hash":"sha256:00"}]}', 'keys.json'),
      /keys\.json: keys\.0\.id/,
    );
    const twice = JSON.stringify({ keys: [alice.entry, alice.entry] });
    assert.throws(() => parseKeyFile(twice, 'keys.json'), /appears twice/);
  });
});
