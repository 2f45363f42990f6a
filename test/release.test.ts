/**
 * The release archive (`npm run release`; docs/operations.md, "Release archive"): one file within
 * its size bound that, unpacked on a host, runs the system with nothing of the checkout: no
 * node_modules, no npm and no Node.js on PATH. Where a Docker engine is usable, it also runs in a
 * Debian image that has no Node.js at all.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runOk, whyNoDocker } from './helpers/docker.ts';
import { grpcClient, texts, unary } from './helpers/grpc.ts';
import { freePort, MODEL_DIR, Proc, ROOT, waitFor } from './helpers/processes.ts';
import { CLASSIFIER } from './helpers/replicas.ts';
import { REDIS_URL, uniquePrefix } from './helpers/system.ts';

const MAX_BYTES = 50 * 1024 * 1024;
const version = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const ARCHIVE = path.join(ROOT, 'release', `tserve-${version}-linux-x64.tar.xz`);

let unpacked = '';
let bare = '';

/** A PATH with only what `bin/tserve` itself uses (a shell and two coreutils) and Redis's server: no node. */
function barePath(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-bare-path-'));
  for (const tool of ['sh', 'readlink', 'dirname', 'redis-server']) {
    const found = spawnSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).stdout.trim();
    fs.symlinkSync(found, path.join(dir, tool));
  }
  return dir;
}

/** The archive's `bin/tserve`, started as a user would, with only the settings given. */
function tserve(args: string[], env: Record<string, string>): Proc {
  const child = spawn(path.join(unpacked, 'tserve', 'bin', 'tserve'), args, {
    env: { PATH: bare, HOME: os.tmpdir(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Proc(`tserve ${args.join(' ')}`, child);
}

async function post(url: string, body: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

/** Waits until the launcher says it is ready, then asks its classifier once and expects an answer. */
async function servesAClassification(launcher: Proc, url: string): Promise<void> {
  await waitFor(
    `${launcher.name} to say ready`,
    async () => /\[launcher\] ready: /.test(launcher.output) || !launcher.running,
    180_000,
  );
  assert.ok(launcher.running, launcher.output);
  const answer = await post(`${url}/models/${CLASSIFIER}`, { inputs: 'a fine film' });
  assert.equal(answer.status, 200, JSON.stringify(answer.json));
  assert.ok(['POSITIVE', 'NEGATIVE'].includes(answer.json[0][0].label), JSON.stringify(answer.json));
}

/** A gRPC ModelInfer from the checkout's .proto file: what the archive's gateway answers of it. */
async function grpcInfer(port: number): Promise<{ model_name: string; shape: number[] }> {
  const client = grpcClient('inference.GRPCInferenceService', port);
  try {
    const answer = await unary(client, 'ModelInfer', { model_name: CLASSIFIER, inputs: [texts('a fine film')] });
    return { model_name: answer.model_name, shape: answer.outputs[0].shape };
  } finally {
    client.close();
  }
}

before(async () => {
  // What a user runs; the build output is already there (the test command builds first).
  await runOk(process.execPath, ['--import', 'tsx', 'scripts/release.ts'], { timeoutMs: 10 * 60_000, cwd: ROOT });
  unpacked = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-release-'));
  await runOk('tar', ['-C', unpacked, '-xJf', ARCHIVE], { timeoutMs: 120_000 });
  bare = barePath();
});

after(() => {
  for (const dir of [unpacked, bare]) if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

describe('npm run release', () => {
  it('writes one archive within 50 MiB: bin/tserve, its Node.js, the bundles, and only the packages that cannot be bundled', () => {
    const bytes = fs.statSync(ARCHIVE).size;
    assert.ok(bytes <= MAX_BYTES, `the archive is ${(bytes / 1024 / 1024).toFixed(1)} MiB`);
    const root = path.join(unpacked, 'tserve');
    assert.deepEqual(fs.readdirSync(root).sort(), ['THIRD-PARTY-LICENSES.txt', 'VERSION', 'bin', 'lib', 'node']);
    const packages = fs
      .readdirSync(path.join(root, 'lib', 'node_modules'))
      .flatMap((name) =>
        name.startsWith('@')
          ? fs.readdirSync(path.join(root, 'lib', 'node_modules', name)).map((n) => `${name}/${n}`)
          : [name],
      );
    // The gRPC packages read their .proto files from beside their code: they travel whole, with
    // what they load (each one's dependencies, found in its copy), and the contract's .proto files.
    const grpc = new Set(['@grpc/grpc-js', '@grpc/proto-loader', '@grpc/reflection', 'grpc-health-check']);
    const manifest = (name: string) =>
      JSON.parse(fs.readFileSync(path.join(root, 'lib', 'node_modules', name, 'package.json'), 'utf8')) as {
        dependencies?: Record<string, string>;
      };
    for (const name of grpc)
      for (const dependency of Object.keys(manifest(name).dependencies ?? {}))
        if (packages.includes(dependency)) grpc.add(dependency);
    assert.deepEqual(
      packages.sort(),
      [
        '@bull-board/ui',
        'onnxruntime-common',
        'onnxruntime-node',
        'swagger-ui-dist',
        '@tserve/contract',
        ...grpc,
      ].sort(),
    );
    assert.ok(fs.existsSync(path.join(root, 'lib', 'node_modules', '@tserve', 'contract', 'proto', 'inference.proto')));
    const binding = fs.readdirSync(path.join(root, 'lib', 'node_modules', 'onnxruntime-node', 'bin', 'napi-v6'));
    assert.deepEqual(binding, ['linux'], 'ONNX Runtime for other platforms travels too');
  });

  it('carries the license texts of its Node.js and of the packages it holds, bundled or copied', () => {
    const notices = fs.readFileSync(path.join(unpacked, 'tserve', 'THIRD-PARTY-LICENSES.txt'), 'utf8');
    assert.match(
      notices,
      new RegExp(`^Node\\.js ${process.version}\\n\\nNode\\.js is licensed for use as follows`, 'm'),
    );
    // What the programs are built on, bundled, and what travels as files beside the bundles.
    for (const name of [
      'bullmq',
      'express',
      'ioredis',
      'prom-client',
      'zod',
      '@huggingface/transformers',
      'swagger-ui-dist',
    ]) {
      // As the gateway's and the worker's code finds them: their own node_modules, else the root's.
      const folder = ['apps/gateway', 'apps/worker', '.']
        .map((dir) => path.join(ROOT, dir, 'node_modules', name))
        .find((dir) => fs.existsSync(path.join(dir, 'package.json')))!;
      const { version } = JSON.parse(fs.readFileSync(path.join(folder, 'package.json'), 'utf8')) as { version: string };
      assert.ok(notices.includes(`\n${name} ${version} (`), `${name} ${version} is not named`);
      const license = fs.readdirSync(folder).find((f) => /^licen[cs]e/i.test(f));
      assert.ok(license, `${name} ships no license file`);
      const text = fs.readFileSync(path.join(folder, license), 'utf8').trim();
      assert.ok(notices.includes(text), `${name}'s license text is missing`);
    }
    for (const name of ['onnxruntime-node', 'onnxruntime-common', '@bull-board/ui'])
      assert.match(notices, new RegExp(`^${name} [0-9.]+ \\(MIT\\)`, 'm'), name);
    assert.doesNotMatch(notices, /^@tserve\//m, 'our own packages are no third party');
  });

  it('`tserve --help` is `npm start --help`; `tserve worker` and `tserve bench` are the worker and the bench', () => {
    const help = (file: string, args: string[]) =>
      spawnSync(file, args, { encoding: 'utf8', env: { PATH: bare, HOME: os.tmpdir() } });
    const bin = path.join(unpacked, 'tserve', 'bin', 'tserve');
    const launcher = spawnSync(process.execPath, [path.join(ROOT, 'apps/launcher/dist/main.js'), '--help'], {
      encoding: 'utf8',
      env: { PATH: process.env.PATH, HOME: os.tmpdir() },
    });
    const archived = help(bin, ['--help']);
    assert.equal(archived.status, 0, archived.stderr);
    assert.equal(archived.stdout, launcher.stdout);
    const worker = help(bin, ['worker', '--help']);
    assert.equal(worker.status, 0, worker.stderr);
    assert.match(worker.stdout, /^tserve worker: /);
    // The GPU bench's program (bench/gpu.sh with TSERVE): its help loads every module it runs.
    const bench = help(bin, ['bench', '--help']);
    assert.equal(bench.status, 0, bench.stderr);
    assert.match(bench.stdout, /^tserve benchmark: /);
  });

  it('unpacked, with no Node.js on PATH, serves a replica model, its dashboard and /docs, and stops on SIGTERM', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const grpcPort = await freePort();
    const system = tserve([], {
      PORT: String(port),
      GRPC_PORT: String(grpcPort),
      MODEL: CLASSIFIER,
      MODEL_DIR,
      WORKERS: '1',
      REDIS_URL,
      QUEUE_PREFIX: uniquePrefix('release'),
      DASHBOARD_USER: 'ops',
      DASHBOARD_PASSWORD: 'secret',
      LOG_LEVEL: 'warn',
    });
    try {
      await servesAClassification(system, url);
      assert.deepEqual(await grpcInfer(grpcPort), { model_name: CLASSIFIER, shape: [1, 2] });

      const script = await fetch(`${url}/docs/swagger-ui-bundle.js`);
      assert.equal(script.status, 200);
      assert.ok((await script.arrayBuffer()).byteLength > 100_000);
      const auth = { authorization: `Basic ${Buffer.from('ops:secret').toString('base64')}` };
      const page = await fetch(`${url}/admin/queues`, { headers: auth });
      assert.equal(page.status, 200);
      const asset = /static\/[^"]+\.js/.exec(await page.text())?.[0];
      assert.ok(asset, 'the dashboard page names no script');
      assert.equal((await fetch(`${url}/admin/queues/${asset}`, { headers: auth })).status, 200);
    } finally {
      const code = await system.stop('SIGTERM', 30_000);
      assert.equal(code, 0, system.output);
    }
  });

  it('runs the scale-out bench with no npm or Node.js on PATH, writing its table and its JSON', async () => {
    const json = path.join(unpacked, 'scale.json');
    const bench = tserve(
      ['bench-scale', '--workers', '1', '--tokens', '16', '--seconds', '1', '--warmup', '0', '--json', json],
      {
        MODEL_DIR,
      },
    );
    const code = await bench.exited;
    assert.equal(code, 0, bench.output);
    assert.match(bench.output, /^ +1 +16 +64 +\d+ +100% /m);
    const result = JSON.parse(fs.readFileSync(json, 'utf8')) as {
      rows: Array<{ workers: number; result: { rps: number } }>;
    };
    assert.deepEqual(
      result.rows.map((r) => r.workers),
      [1],
    );
    assert.ok(result.rows[0].result.rps > 0);
  });

  it('runs in a Debian image with no Node.js in it', { skip: whyNoDocker() }, async () => {
    // The runtime image's base (scripts/docker-base-images.sh makes it where no registry is reachable).
    await runOk('bash', [path.join(ROOT, 'scripts/docker-base-images.sh')], { timeoutMs: 15 * 60_000 });
    const port = await freePort();
    const mounts = ['-v', `${path.join(unpacked, 'tserve')}:/opt/tserve:ro`, '-v', `${MODEL_DIR}:/models:ro`];
    const image = 'debian:bookworm-slim';
    const none = spawnSync('docker', ['run', '--rm', image, 'sh', '-c', 'command -v node || echo none'], {
      encoding: 'utf8',
    });
    assert.equal(none.stdout.trim(), 'none', 'the image has a Node.js of its own');
    const name = `tserve-release-${process.pid}`;
    // The host's Redis, through the host's network; q8 reads the read-only models as they are.
    const env = [
      `PORT=${port}`,
      `GRPC_PORT=${await freePort()}`,
      `MODEL=${CLASSIFIER}`,
      'MODEL_DIR=/models',
      'DTYPE=q8',
      `REDIS_URL=${REDIS_URL}`,
    ];
    const container = new Proc(
      'container',
      spawn(
        'docker',
        [
          'run',
          '--rm',
          '--name',
          name,
          '--network',
          'host',
          '--user',
          '1000:1000',
          ...mounts,
          ...env.flatMap((e) => ['-e', e]),
          '-e',
          `QUEUE_PREFIX=${uniquePrefix('release-docker')}`,
          '-e',
          'HOME=/tmp',
          image,
          '/opt/tserve/bin/tserve',
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      ),
    );
    try {
      await servesAClassification(container, `http://127.0.0.1:${port}`);
    } finally {
      spawnSync('docker', ['stop', '--time', '30', name]);
      await container.exited;
    }
  });
});
