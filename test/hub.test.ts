/**
 * Issue 48: models the way users get them, from the hub or a mirror. A real HTTP mirror on
 * loopback serves ../shared/models in the hub's URL layout, HF_ENDPOINT points the workers at it,
 * and each worker downloads into a private cache (MODEL_DIR unset), as a user's would.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ReadyBody } from '@tserve/contract';
import { HubMirror } from './helpers/hub-mirror.ts';
import { freePort, MODEL_DIR, TestSystem, uniquePrefix, waitFor, type Proc } from './helpers/system.ts';

const MODEL = 'replica/tiny-bert-sst2';
const GATED = 'private/tiny-bert-sst2';
/** DTYPE=auto on the CPU takes fp32 where the hub has it, as it does here. */
const WEIGHTS = 'onnx/model.onnx';
const TOKEN = `hf_${crypto.randomBytes(12).toString('hex')}`;
const TEXTS = ['This restaurant is awesome', 'This restaurant is awful', 'the service was slow but the food was fine'];

const sha256 = (file: string) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
const snapshot = (cache: string, model: string) =>
  path.join(cache, `models--${model.replace('/', '--')}`, 'snapshots', HubMirror.COMMIT);

describe('models from the hub or a mirror', () => {
  const mirror = new HubMirror({
    [MODEL]: { dir: path.join(MODEL_DIR, MODEL) },
    [GATED]: { dir: path.join(MODEL_DIR, MODEL), token: TOKEN },
  });
  const system = new TestSystem(uniquePrefix('hub'));
  const caches: string[] = [];
  const newCache = () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-hub-cache-'));
    caches.push(dir);
    return dir;
  };
  /** A worker that loads from the mirror into `cache`: no MODEL_DIR, its progress logged. */
  const hubWorker = (model: string, cache: string, env: Record<string, string | number | undefined> = {}): Proc =>
    system.startWorker({
      model,
      env: { MODEL_DIR: undefined, HF_ENDPOINT: mirror.url, HF_HUB_CACHE: cache, LOG_LEVEL: 'info', ...env },
    });
  const answers = async (model: string) => {
    const out = [];
    for (const text of TEXTS) {
      const r = await system.infer(model, text, { top_k: null });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      out.push({ body: r.body, revision: r.headers.get('x-model-revision'), sha256: r.headers.get('x-model-sha256') });
    }
    return out;
  };
  const ready = async () => (await (await fetch(`${system.url}/ready`)).json()) as ReadyBody;
  /** Stops a worker and waits until the gateway no longer counts it. */
  const stopWorker = async (worker: Proc, model: string) => {
    await worker.stop('SIGTERM');
    await waitFor(`no worker for ${model}`, async () => ((await ready()).models[model]?.workers ?? 0) === 0, 15_000);
  };
  /** A worker that must fail to load: its exit code and what it wrote. */
  const failure = async (worker: Proc) => {
    const code = await worker.exited;
    assert.notEqual(code, 0, `the worker loaded:\n${worker.output}`);
    return worker.output;
  };
  let local: Awaited<ReturnType<typeof answers>>;

  before(async () => {
    await mirror.start();
    await system.startGateway();
    // What the local folder answers, for the hub's answers to match.
    const worker = system.startWorker({ model: MODEL });
    await system.waitForWorkers(MODEL);
    local = await answers(MODEL);
    await stopWorker(worker, MODEL);
  });
  after(async () => {
    await system.stop();
    await mirror.stop();
    for (const dir of caches) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('loads a model by id from HF_ENDPOINT, answers as the local folder does, and names its revision and weights', async () => {
    const cache = newCache();
    const worker = hubWorker(MODEL, cache);
    await system.waitForWorkers(MODEL);
    const fromHub = await answers(MODEL);
    // DTYPE=auto runs int8 per row, written from the fp32 file at first load: beside the local
    // folder's, and in the snapshot for the hub's. The same file from the same weights.
    const snap = snapshot(cache, MODEL);
    const rows = fs.readdirSync(path.join(snap, 'onnx')).find((file) => file.startsWith('model_int8_row_'));
    assert.ok(rows, 'the int8-row file in the snapshot');
    const weightsSha = sha256(path.join(snap, 'onnx', rows));
    assert.equal(sha256(path.join(MODEL_DIR, MODEL, 'onnx', rows)), weightsSha);
    assert.deepEqual(
      fromHub.map((a) => a.body),
      local.map((a) => a.body),
    );
    for (const a of local)
      assert.deepEqual(
        [a.revision, a.sha256],
        [null, weightsSha],
        'a local folder has no revision, and its weights hash',
      );
    for (const a of fromHub) assert.deepEqual([a.revision, a.sha256], [HubMirror.COMMIT, weightsSha]);

    const info = (await (await fetch(`${system.url}/info?model=${encodeURIComponent(MODEL)}`)).json()) as Record<
      string,
      unknown
    >;
    assert.equal(info.model_sha, HubMirror.COMMIT);
    assert.equal(info.model_weights_sha256, weightsSha);
    const v2 = (await (await fetch(`${system.url}/v2/models/${MODEL}`)).json()) as {
      parameters: Record<string, unknown>;
    };
    assert.equal(v2.parameters.revision, HubMirror.COMMIT);
    assert.equal(v2.parameters.weights_sha256, weightsSha);
    assert.equal((await ready()).models[MODEL].weights_sha256, weightsSha);
    assert.equal(
      await system.metric('tserve_model_weights', { model: MODEL, revision: HubMirror.COMMIT, sha256: weightsSha }),
      1,
    );

    // huggingface_hub's layout: the ref names the commit, the snapshot holds whole files only.
    assert.equal(
      fs.readFileSync(path.join(cache, `models--replica--tiny-bert-sst2`, 'refs', 'main'), 'utf8'),
      HubMirror.COMMIT,
    );
    assert.equal(sha256(path.join(snap, WEIGHTS)), sha256(path.join(MODEL_DIR, MODEL, WEIGHTS)));
    assert.deepEqual(
      fs.readdirSync(path.join(snap, 'onnx')).sort(),
      ['model.onnx', rows].sort(),
      'only the weights int8-row is written from (fp32, though the hub has q8 too), the int8-row file, and no .incomplete file',
    );
    // The weights came through the hub's redirect to its storage, which never saw a token.
    assert.ok(mirror.requests.some((r) => r.server === 'storage' && r.method === 'GET'));
    await stopWorker(worker, MODEL);
  });

  it('a pinned revision the server does not have fails the load, saying so', async () => {
    const cache = newCache();
    const out = await failure(hubWorker(MODEL, cache, { MODEL_REVISION: 'v9.9' }));
    assert.match(
      out,
      /cannot load model "replica\/tiny-bert-sst2" \(revision v9\.9\) from http:\/\/127\.0\.0\.1:\d+: revision "v9\.9" not found/,
    );
    assert.doesNotMatch(out, /\n\s+at /, 'no stack trace');
    assert.ok(
      !fs.existsSync(path.join(cache, 'models--replica--tiny-bert-sst2', 'snapshots')),
      'nothing cached for a revision that does not exist',
    );
    // The gateway says why the model is not served.
    await waitFor(
      'the load failure in /ready',
      async () => (await ready()).reasons.some((r) => r.includes('revision "v9.9"')),
      10_000,
    );
  });

  it('a gated model gets 401 without a token and loads with one, which no log shows and only HF_ENDPOINT receives', async () => {
    const out = await failure(hubWorker(GATED, newCache()));
    assert.match(out, /not readable: the server answered 401: a gated or private model needs HF_TOKEN/);
    const wrong = await failure(hubWorker(GATED, newCache(), { HF_TOKEN: 'hf_not_the_right_one' }));
    assert.match(wrong, /HF_TOKEN was refused \(403\)/);
    assert.ok(!wrong.includes('hf_not_the_right_one'), 'a refused token is not logged either');

    const before = mirror.requests.length;
    const worker = hubWorker(GATED, newCache(), { HF_TOKEN: TOKEN, LOG_LEVEL: 'debug' });
    await system.waitForWorkers(GATED);
    assert.deepEqual(
      (await answers(GATED)).map((a) => a.body),
      local.map((a) => a.body),
    );
    const seen = mirror.requests.slice(before);
    assert.ok(seen.length > 0);
    for (const r of seen) {
      assert.equal(
        r.authorization,
        r.server === 'hub' ? `Bearer ${TOKEN}` : undefined,
        `${r.server} ${r.method} ${r.path}`,
      );
    }
    for (const proc of system.procs) assert.ok(!proc.output.includes(TOKEN), `${proc.name} logged the token`);
    await stopWorker(worker, GATED);
  });

  it('a slow download shows its progress in the log and /ready, and the 503 counts the rest of it', async () => {
    const cache = newCache();
    // The weights (fp32, 17.6 MB) take about 17 seconds at this pace.
    mirror.bytesPerSecond = 1_000_000;
    let victim: Proc | undefined;
    try {
      victim = hubWorker(MODEL, cache);
      const loading = await waitFor(
        'a download under way in /ready',
        async () => {
          const m = (await ready()).models[MODEL];
          return m?.download && m.download.percent >= 20 && m.download.bytes_per_second > 0 ? m : undefined;
        },
        20_000,
        50,
      );
      assert.equal(loading.loading, true);
      assert.equal(loading.download!.file, WEIGHTS);
      assert.ok(loading.download!.total_bytes >= fs.statSync(path.join(MODEL_DIR, MODEL, WEIGHTS)).size);

      const refused = await system.infer(MODEL, TEXTS[0]);
      assert.equal(refused.status, 503);
      assert.match(refused.body.error, /currently loading/);
      const d = loading.download!;
      const rest = (d.total_bytes - d.bytes) / d.bytes_per_second;
      assert.ok(
        refused.body.estimated_time >= Math.floor(rest) - 1,
        `estimated_time ${refused.body.estimated_time} s, yet ${rest.toFixed(1)} s of download remain`,
      );

      // Slower still, so that the download is surely under way when the worker is killed below.
      mirror.bytesPerSecond = 100_000;
      const progress = await waitFor(
        'a progress line in the log',
        async () =>
          victim!.output
            .split('\n')
            .filter((line) => line.includes('"msg":"downloading"'))
            .map((line) => JSON.parse(line) as Record<string, number | string>)
            .find((p) => (p.percent as number) > 0),
        10_000,
      );
      assert.equal(progress.file, WEIGHTS);
      assert.ok((progress.percent as number) < 100);
      assert.ok(
        (progress.bytesPerSecond as number) > 0 &&
          (progress.totalBytes as number) > 0 &&
          (progress.bytes as number) > 0,
      );

      // Killed halfway: what it leaves is an .incomplete file, never the weights file itself.
      victim.kill('SIGKILL');
      await victim.exited;
    } finally {
      mirror.bytesPerSecond = undefined;
    }
    const onnx = path.join(snapshot(cache, MODEL), 'onnx');
    assert.ok(!fs.existsSync(path.join(onnx, 'model.onnx')), 'a half download was left as the weights file');
    assert.ok(
      fs.readdirSync(onnx).some((f) => f.endsWith('.incomplete')),
      'the killed download leaves its partial file under a temporary name',
    );

    // Offline, the half file counts for nothing: the load fails, naming what is missing.
    const offline = await failure(
      hubWorker(MODEL, cache, { HF_HUB_OFFLINE: 1, HF_ENDPOINT: `http://127.0.0.1:${await freePort()}` }),
    );
    assert.match(offline, /from the cache at \S+: HF_HUB_OFFLINE=1, and \S+ lacks onnx\/model\.onnx/);

    // Online again, through a connection cut halfway: the download resumes where it broke.
    mirror.cutOnce.add(WEIGHTS);
    const resumed = hubWorker(MODEL, cache);
    await system.waitForWorkers(MODEL);
    assert.match(resumed.output, /download interrupted; resuming/);
    assert.ok(
      mirror.requests.some((r) => r.server === 'storage' && r.range && r.range !== 'bytes=0-'),
      'the retry asked for the rest of the file only',
    );
    assert.equal(sha256(path.join(onnx, 'model.onnx')), sha256(path.join(MODEL_DIR, MODEL, WEIGHTS)));
    assert.deepEqual(
      (await answers(MODEL)).map((a) => a.body),
      local.map((a) => a.body),
    );
    await stopWorker(resumed, MODEL);

    // A second start with HF_HUB_OFFLINE=1 loads from the cache, asking the network nothing.
    const asked = mirror.requests.length;
    const cached = hubWorker(MODEL, cache, { HF_HUB_OFFLINE: 1 });
    await system.waitForWorkers(MODEL);
    assert.deepEqual(
      (await answers(MODEL)).map((a) => [a.body, a.revision]),
      local.map((a) => [a.body, HubMirror.COMMIT]),
    );
    assert.equal(mirror.requests.length, asked, 'an offline worker asked the mirror');
    await stopWorker(cached, MODEL);
  });

  it('with readable logs, a download is a bar with its size, rate and time left', async () => {
    const cache = newCache();
    // The weights take about 9 seconds at this pace: several progress lines.
    mirror.bytesPerSecond = 2_000_000;
    let worker: Proc | undefined;
    try {
      worker = hubWorker(MODEL, cache, { LOG_FORMAT: 'pretty' });
      const line = await waitFor(
        'a progress bar in the log',
        async () => worker!.output.split('\n').find((l) => l.includes(`downloading ${WEIGHTS} [█`)),
        20_000,
      );
      assert.match(
        line,
        new RegExp(
          `worker ${MODEL}: downloading ${WEIGHTS} \\[█+░*\\] +\\d+%  [\\d.]+ MB of [\\d.]+ MB  [\\d.]+ [kM]B/s  \\d+ s left$`,
        ),
      );
      await system.waitForWorkers(MODEL);
      const lines = worker.output.split('\n').filter((l) => l.trim() !== '');
      assert.deepEqual(
        lines.filter((l) => l.startsWith('{')),
        [],
        'JSON lines among the readable ones',
      );
      assert.ok(
        lines.some((l) => /download complete: [\d.]+ MB in \d+ s/.test(l)),
        worker.output,
      );
    } finally {
      mirror.bytesPerSecond = undefined;
    }
    if (worker) await stopWorker(worker, MODEL);
  });

  it('weights that do not match their etag are fetched again; a hub that cannot be reached leaves the cache to serve', async () => {
    const cache = newCache();
    mirror.corruptOnce.add(WEIGHTS);
    const worker = hubWorker(MODEL, cache);
    await system.waitForWorkers(MODEL);
    assert.match(worker.output, /its sha256 [0-9a-f]{64} is not the [0-9a-f]{64} the server named/);
    assert.equal(sha256(path.join(snapshot(cache, MODEL), WEIGHTS)), sha256(path.join(MODEL_DIR, MODEL, WEIGHTS)));
    await stopWorker(worker, MODEL);

    // Online, but nothing answers at HF_ENDPOINT: the cached revision is loaded, with a warning.
    const fallback = hubWorker(MODEL, cache, { HF_ENDPOINT: `http://127.0.0.1:${await freePort()}` });
    await system.waitForWorkers(MODEL);
    assert.match(fallback.output, /cannot reach the hub; loading the model from the cache/);
    assert.deepEqual(
      (await answers(MODEL)).map((a) => [a.body, a.revision]),
      local.map((a) => [a.body, HubMirror.COMMIT]),
    );
    await stopWorker(fallback, MODEL);
  });
});
