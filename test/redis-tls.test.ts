/**
 * Issue 87: a Redis as managed services run it, TLS (rediss://) with an ACL user and password, its
 * certificate signed by a CA of the test's own (REDIS_TLS_CA); no plain port, no default user. The
 * core path works over it: an answer, the response cache, the dashboard, a Batch API batch. A wrong
 * password, an unknown CA, a CA file that is not there: each program stops at start with the
 * reason, instead of retrying forever in silence.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI, { toFile } from 'openai';
import { Redis } from 'ioredis';
import { loadGatewayConfig } from '@tserve/config';
import { redisOptions } from '@tserve/queue';
import { freePort, MODEL_DIR, PrivateRedis, TestSystem, uniquePrefix, waitFor } from './helpers/system.ts';
import { startNode } from './helpers/processes.ts';
import { CLASSIFIER as MODEL } from './helpers/replicas.ts';

const USER = 'tserve';
/** Characters a URL must percent-encode: REDIS_URL carries them so. */
const PASSWORD = 'p@ss:w/rd';
/** The test's own user, to look at Redis's clients. */
const ADMIN = 'test-admin';
const DASHBOARD = { DASHBOARD_USER: 'admin', DASHBOARD_PASSWORD: 'dashboard-secret' };

/** A CA, and a certificate it signed for localhost and 127.0.0.1, made with openssl in `dir`. */
function certificates(dir: string): { ca: string; cert: string; key: string } {
  const file = (name: string) => path.join(dir, name);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=tserve test CA');
  openssl('req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost');
  fs.writeFileSync(file('san.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  openssl(
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.pem',
    '-days',
    '2',
    '-extfile',
    'san.ext',
  );
  return { ca: file('ca.pem'), cert: file('server.pem'), key: file('server.key') };
}

describe('Redis over TLS with an ACL user', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-tls-'));
  const certs = certificates(dir);
  let redis: PrivateRedis;
  let url: string;
  let system: TestSystem;
  /** A program's settings with REDIS_URL's password (or CA file) replaced. */
  const settings = (edit: { password?: string; ca?: string } = {}) => ({
    REDIS_URL: url.replace(encodeURIComponent(PASSWORD), encodeURIComponent(edit.password ?? PASSWORD)),
    REDIS_TLS_CA: edit.ca ?? certs.ca,
  });

  before(async () => {
    const port = await freePort();
    url = `rediss://${USER}:${encodeURIComponent(PASSWORD)}@localhost:${port}`;
    const prefix = uniquePrefix('tls');
    redis = new PrivateRedis(port, undefined, {
      // TLS only (no plain port), the default user off. tserve's user may touch its own prefix's
      // keys and channels only, and no command of @dangerous but INFO (BullMQ asks Redis's
      // version); the test's own user sees everything.
      args: [
        ...['--port', '0', '--tls-port', String(port), '--tls-auth-clients', 'no'],
        ...['--tls-cert-file', certs.cert, '--tls-key-file', certs.key, '--tls-ca-cert-file', certs.ca],
        ...['--user', 'default', 'off', '--user', ADMIN, 'on', `>${ADMIN}`, '~*', '&*', '+@all'],
        ...['--user', USER, 'on', `>${PASSWORD}`, `~${prefix}:*`, `&${prefix}:*`, '+@all', '-@dangerous', '+info'],
      ],
      target: loadGatewayConfig(settings()),
    });
    await redis.start();
    system = new TestSystem(prefix, url, { REDIS_TLS_CA: certs.ca });
    await system.startGateway({ RESPONSE_CACHE_TTL_S: 600, ...DASHBOARD });
    system.startWorker({ model: MODEL });
    await system.waitForWorkers(MODEL);
  });
  after(async () => {
    await system?.stop();
    await redis?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('serves an answer, the response cache, the dashboard and a batch over rediss:// as the ACL user', async () => {
    const first = await system.infer(MODEL, 'a text to keep');
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.equal(first.headers.get('x-cache'), 'miss');
    const again = await system.infer(MODEL, 'a text to keep');
    assert.equal(again.headers.get('x-cache'), 'hit');
    assert.deepEqual(again.body, first.body);

    const authorization = `Basic ${Buffer.from(`${DASHBOARD.DASHBOARD_USER}:${DASHBOARD.DASHBOARD_PASSWORD}`).toString('base64')}`;
    const board = await fetch(`${system.url}/admin/queues/api/queues`, { headers: { authorization } });
    assert.equal(board.status, 200);
    const queues = ((await board.json()) as { queues: Array<{ name: string; counts: Record<string, number> }> }).queues;
    assert.ok(
      queues.some((q) => q.name.includes('tiny-bert-sst2') && q.counts.completed >= 1),
      JSON.stringify(queues),
    );

    const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const lines = Array.from({ length: 20 }, (_, i) =>
      JSON.stringify({ custom_id: `l${i}`, method: 'POST', url: `/models/${MODEL}`, body: { inputs: `line ${i}` } }),
    );
    const file = await client.files.create({
      file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'input.jsonl'),
      purpose: 'batch',
    });
    const created = await client.batches.create({
      input_file_id: file.id,
      endpoint: `/models/${MODEL}` as '/v1/embeddings',
      completion_window: '24h',
    });
    const done = await waitFor('the batch completed', async () => {
      const now = await client.batches.retrieve(created.id);
      return now.status === 'completed' && now;
    });
    const output = (await (await client.files.content(done.output_file_id!)).text()).split('\n').filter(Boolean);
    assert.deepEqual(
      output.map((line) => (JSON.parse(line) as { custom_id: string }).custom_id).sort(),
      lines.map((_, i) => `l${i}`).sort(),
    );

    // Every connection of the gateway and the worker is the ACL user's (the default user is off).
    const admin = new Redis({
      ...redisOptions(loadGatewayConfig(settings())),
      username: ADMIN,
      password: ADMIN,
    });
    try {
      const clients = String(await admin.client('LIST'))
        .split('\n')
        .filter((line) => / name=tserve-/.test(line));
      assert.ok(clients.length >= 4, `the programs' connections: ${clients.length}`);
      for (const line of clients) assert.match(line, / user=tserve /);
      assert.doesNotMatch(system.logs(), /NOPERM/, 'the user has every right the programs use');
    } finally {
      admin.disconnect();
    }
  });

  it('stops each program at start, naming the cause, when Redis refuses its password or its CA is wrong', async () => {
    /** Starts `script` with `env` and resolves with its exit code and output, once it has exited. */
    const run = async (script: string, env: Record<string, string>) => {
      const proc = startNode({
        name: script,
        script,
        env: { QUEUE_PREFIX: system.prefix, MODEL_DIR, MODEL, PORT: 0, GRPC_PORT: 0, HOST: '127.0.0.1', ...env },
      });
      const code = await Promise.race([
        proc.exited,
        new Promise<string>((resolve) => setTimeout(() => resolve('still running'), 30_000)),
      ]);
      proc.kill('SIGKILL');
      return { code, output: proc.output };
    };
    const wrongPassword = settings({ password: 'not-it' });
    for (const script of ['apps/gateway/dist/main.js', 'apps/worker/dist/main.js', 'apps/launcher/dist/main.js']) {
      const { code, output } = await run(script, wrongPassword);
      assert.equal(code, 1, `${script}: ${output}`);
      assert.match(
        output,
        /Redis refuses the user or password at REDIS_URL=rediss:\/\/tserve:\*\*\*@localhost:\d+: WRONGPASS/,
      );
      assert.match(output, /Check the user:password in REDIS_URL/);
      assert.ok(!output.includes('not-it'), 'the password is not printed');
    }
    const unknownCa = await run('apps/gateway/dist/main.js', { ...settings(), REDIS_TLS_CA: '' });
    assert.equal(unknownCa.code, 1, unknownCa.output);
    assert.match(unknownCa.output, /TLS to Redis failed at REDIS_URL=.*self[- ]signed certificate.*REDIS_TLS_CA/);
    const missingCa = await run('apps/worker/dist/main.js', settings({ ca: path.join(dir, 'missing.pem') }));
    assert.equal(missingCa.code, 1, missingCa.output);
    assert.match(missingCa.output, /REDIS_TLS_CA: cannot read .*missing\.pem \(ENOENT\)/);
    // The server still serves the settings that are right.
    assert.equal((await system.infer(MODEL, 'still served')).status, 200);
  });
});
