/**
 * Operations: GET /metrics (Prometheus text format), the timing headers, and the gateway's one JSON
 * log line per request, against a real gateway and a real tiny-bert-sst2 worker.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { processMemory, TestSystem, sleep, uniquePrefix, waitFor } from './helpers/system.ts';
import { CLASSIFIER as MODEL } from './helpers/replicas.ts';
import { containerLimits, defaultWorkerMemoryMiB } from '../apps/worker/src/model/container-limits.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The text format's sample lines: `name{a="x",b="y"} value`. */
function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(match, `not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, key, value] of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[key] = value;
    samples.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return samples;
}

/** The one sample with exactly these labels (among those it has); fails when there is none. */
function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  const found = samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  assert.equal(found.length, 1, `expected one ${name}${JSON.stringify(labels)}, found ${found.length}`);
  return found[0].value;
}

describe('metrics, timing headers and request logs', () => {
  const system = new TestSystem(uniquePrefix('metrics'));
  let worker: ReturnType<TestSystem['startWorker']>;
  let workerStartedAt = 0;

  const scrape = async () => {
    const res = await fetch(`${system.url}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
    return parseMetrics(await res.text());
  };

  before(async () => {
    await system.startGateway({ LOG_LEVEL: 'info' });
    // A long announcement TTL: the worker is paused below, and must stay listed meanwhile.
    workerStartedAt = performance.now();
    worker = system.startWorker({ model: MODEL, env: { WORKER_TTL_MS: 20_000 } });
    await system.waitForWorkers(MODEL);
  });
  after(async () => {
    if (worker?.running) process.kill(worker.pid, 'SIGCONT');
    await system.stop();
  });

  const okResponses: Array<{ status: number; headers: Headers; body: unknown }> = [];

  it('answers with numeric timing headers and a request id', async () => {
    for (const text of ['a fine day', 'a dull day', 'nothing much']) okResponses.push(await system.infer(MODEL, text));
    // One job of sixteen inputs: its model call holds at least those sixteen sequences.
    const list = await system.infer(
      MODEL,
      Array.from({ length: 16 }, (_, i) => `input number ${i}`),
    );
    okResponses.push(list);
    for (const res of okResponses) {
      assert.equal(res.status, 200, JSON.stringify(res.body));
      for (const header of ['x-queue-time', 'x-inference-time', 'x-total-time']) {
        const raw = res.headers.get(header);
        assert.ok(raw !== null, `${header} missing`);
        const ms = Number(raw);
        assert.ok(Number.isFinite(ms) && ms >= 0, `${header}: ${raw}`);
      }
      // The model time of a many-input job is its calls' time, counted once, not once per input.
      const [inference, total] = [Number(res.headers.get('x-inference-time')), Number(res.headers.get('x-total-time'))];
      assert.ok(
        total >= inference,
        `x-total-time ${total} ms includes x-inference-time ${inference} ms (batch of ${res.headers.get('x-batch-size')})`,
      );
      assert.match(res.headers.get('x-request-id') ?? '', UUID);
    }
    assert.ok(Number(list.headers.get('x-batch-size')) >= 16, `x-batch-size ${list.headers.get('x-batch-size')}`);
    assert.equal(
      new Set(okResponses.map((r) => r.headers.get('x-request-id'))).size,
      okResponses.length,
      'request ids are unique',
    );
  });

  it('counts requests by route pattern and status, and times them', async () => {
    const invalid = await system.infer(MODEL, 5);
    assert.equal(invalid.status, 400);
    assert.match(invalid.headers.get('x-request-id') ?? '', UUID, 'error answers carry the request id too');
    const unknownModel = await system.infer('nobody/no-such-model', 'text');
    assert.equal(unknownModel.status, 404);
    const unknownRoute = await fetch(`${system.url}/no/such/route`);
    assert.equal(unknownRoute.status, 404);
    // Protocols answer their errors in their own shapes, from handlers mounted under their prefix.
    const json = { method: 'POST', headers: { 'content-type': 'application/json' } };
    const openAiError = await fetch(`${system.url}/v1/embeddings`, {
      ...json,
      body: JSON.stringify({ model: MODEL, input: [1, 2] }),
    });
    assert.equal(openAiError.status, 400);
    const kserveError = await fetch(`${system.url}/v2/models/${MODEL}/infer`, { ...json, body: '{}' });
    assert.equal(kserveError.status, 400);

    const samples = await scrape();
    const post = { method: 'POST', route: '/models/*id' };
    assert.equal(value(samples, 'tserve_http_requests_total', { ...post, status: '200' }), 4);
    assert.equal(value(samples, 'tserve_http_requests_total', { ...post, status: '400' }), 1);
    assert.equal(value(samples, 'tserve_http_requests_total', { ...post, status: '404' }), 1);
    assert.equal(value(samples, 'tserve_http_requests_total', { method: 'GET', route: 'unmatched', status: '404' }), 1);
    assert.equal(
      value(samples, 'tserve_http_requests_total', { method: 'POST', route: '/v1/embeddings', status: '400' }),
      1,
    );
    assert.equal(
      value(samples, 'tserve_http_requests_total', { method: 'POST', route: '/v2/models/*path', status: '400' }),
      1,
    );
    assert.ok(value(samples, 'tserve_http_requests_total', { method: 'GET', route: '/ready', status: '200' }) >= 1);
    // Neither model ids nor unknown paths become label values.
    const routes = new Set(samples.filter((s) => s.name === 'tserve_http_requests_total').map((s) => s.labels.route));
    assert.deepEqual(
      [...routes].filter((r) => r.includes('replica') || r.includes('nobody') || r.includes('/no/')),
      [],
    );

    const ok = { ...post, status: '200' };
    assert.equal(value(samples, 'tserve_http_request_duration_seconds_count', ok), 4);
    assert.equal(value(samples, 'tserve_http_request_duration_seconds_bucket', { ...ok, le: '+Inf' }), 4);
    const seconds = value(samples, 'tserve_http_request_duration_seconds_sum', ok);
    const headerSeconds = okResponses.reduce((sum, r) => sum + Number(r.headers.get('x-total-time')), 0) / 1000;
    assert.ok(
      seconds >= headerSeconds && seconds < headerSeconds + 1,
      `latency sum ${seconds}s vs x-total-time sum ${headerSeconds}s`,
    );

    // Default process metrics, in the same registry.
    assert.ok(value(samples, 'process_cpu_user_seconds_total') > 0);
    assert.ok(samples.some((s) => s.name === 'nodejs_eventloop_lag_seconds'));
  });

  it("reports workers, the breaker, and each answered job's queue, model and batch timing", async () => {
    const samples = await scrape();
    const model = { model: MODEL };
    assert.equal(value(samples, 'tserve_live_workers', model), 1);
    assert.equal(
      value(samples, 'tserve_workers', { ...model, device: 'cpu', dtype: 'int8-row' }),
      1,
      'workers by device and dtype (auto on a CPU)',
    );
    assert.equal(value(samples, 'tserve_breaker_state', { breaker: 'redis', state: 'closed' }), 1);
    assert.equal(value(samples, 'tserve_breaker_state', { breaker: 'redis', state: 'open' }), 0);
    assert.equal(value(samples, 'tserve_breaker_state', { breaker: 'redis', state: 'half-open' }), 0);

    const jobs = okResponses.length;
    assert.equal(value(samples, 'tserve_batch_size_count', model), jobs);
    const batchSum = okResponses.reduce((sum, r) => sum + Number(r.headers.get('x-batch-size')), 0);
    assert.equal(value(samples, 'tserve_batch_size_sum', model), batchSum);
    assert.ok(
      value(samples, 'tserve_batch_size_bucket', { ...model, le: '2' }) < jobs,
      'the sixteen-input job is in a bucket above 2',
    );
    assert.equal(value(samples, 'tserve_queue_wait_seconds_count', model), jobs);
    assert.equal(value(samples, 'tserve_inference_duration_seconds_count', model), jobs);
    const inferenceMs = okResponses.reduce((sum, r) => sum + Number(r.headers.get('x-inference-time')), 0);
    assert.ok(
      Math.abs(value(samples, 'tserve_inference_duration_seconds_sum', model) * 1000 - inferenceMs) < 0.01,
      'inference seconds are the x-inference-time values',
    );
  });

  it("reports how long each worker's model has computed, from its heartbeats", async () => {
    const busySeconds = async () => {
      const samples = (await scrape()).filter(
        (s) => s.name === 'tserve_model_busy_seconds_total' && s.labels.model === MODEL,
      );
      assert.equal(samples.length, 1, 'one series for the one worker');
      assert.ok(samples[0].labels.worker, 'labelled with the worker id');
      return samples[0].value;
    };
    // The warm-up call and the requests above count from the first heartbeat after them.
    const before = await waitFor('the model busy time in a heartbeat', async () => {
      const seconds = await busySeconds();
      return seconds > 0 && seconds;
    });
    const res = await system.infer(
      MODEL,
      Array.from({ length: 16 }, (_, i) => `busy input ${i}`),
    );
    assert.equal(res.status, 200);
    okResponses.push(res);
    await waitFor('the new model call in a heartbeat', async () => (await busySeconds()) > before);
    // One model thread: its busy time cannot outgrow the time since its worker started (it would, by
    // a thousand, in the wrong unit).
    const busy = await busySeconds();
    const alive = (performance.now() - workerStartedAt) / 1000;
    assert.ok(busy < alive, `busy ${busy} s within the ${alive} s the worker has run`);
  });

  it("reports each worker's resident memory, its peak, and the largest call it ran, from its heartbeats", async () => {
    const labels = {
      model: MODEL,
      worker: (await scrape()).find((s) => s.name === 'tserve_model_busy_seconds_total')!.labels.worker,
    };
    // The sixteen inputs of the test above ran as one call of 16 rows.
    const samples = await waitFor('the largest call in a heartbeat', async () => {
      const now = await scrape();
      return value(now, 'tserve_worker_largest_call_tokens', labels) >= 16 && now;
    });
    const rss = value(samples, 'tserve_worker_resident_memory_bytes', labels);
    const peak = value(samples, 'tserve_worker_peak_resident_memory_bytes', labels);
    const actual = processMemory(worker.pid)!;
    // A live process of a few hundred MiB; the gauge is as of the last beat, so within a margin of now.
    assert.ok(
      rss > 100 * 2 ** 20 && Math.abs(rss / 2 ** 20 - actual.rss) < 64,
      `RSS ${rss} bytes against ${actual.rss} MiB`,
    );
    assert.ok(peak >= rss && peak <= actual.peak * 2 ** 20, `peak ${peak} bytes, RSS ${rss}, VmHWM ${actual.peak} MiB`);
    // Without WORKER_MEMORY_MB, the default this machine's limits give (container-limits.ts).
    const budget = defaultWorkerMemoryMiB(containerLimits().memoryLimitBytes) * 2 ** 20;
    assert.equal(
      value(samples, 'tserve_worker_memory_budget_bytes', labels),
      budget,
      'the default budget without WORKER_MEMORY_MB',
    );
  });

  it('shows waiting jobs as queue depth while the worker is paused', async () => {
    // The depth is an estimate refreshed every REGISTRY_REFRESH_MS; earlier tests' jobs may still be in it.
    await waitFor(
      'queue depth 0',
      async () => value(await scrape(), 'tserve_queue_depth', { model: MODEL }) === 0,
      5000,
    );
    process.kill(worker.pid, 'SIGSTOP');
    let answers: Array<Promise<{ status: number }>> = [];
    try {
      answers = ['x', 'y', 'z'].map((text) => system.infer(MODEL, text));
      // The registry recounts waiting jobs every REGISTRY_REFRESH_MS (100 ms in tests).
      await waitFor(
        'queue depth 3',
        async () => value(await scrape(), 'tserve_queue_depth', { model: MODEL }) === 3,
        5000,
      );
      await sleep(300);
    } finally {
      process.kill(worker.pid, 'SIGCONT');
    }
    for (const res of await Promise.all(answers)) assert.equal(res.status, 200);
    await waitFor(
      'queue depth back to 0',
      async () => value(await scrape(), 'tserve_queue_depth', { model: MODEL }) === 0,
      5000,
    );
    const samples = await scrape();
    // Those three waited at least the 300 ms the worker was paused after they were counted.
    const waited = value(samples, 'tserve_queue_wait_seconds_sum', { model: MODEL });
    assert.ok(waited >= 0.9, `queue wait sum ${waited}s`);
    assert.ok(
      value(samples, 'tserve_queue_wait_seconds_bucket', { model: MODEL, le: '0.25' }) <= okResponses.length,
      'the paused jobs are in buckets above 250 ms',
    );
  });

  it('logs one JSON line per request with its id, route, status and duration, and no body', async () => {
    const secret = `do-not-log-${Math.random().toString(36).slice(2)}`;
    const res = await system.infer(MODEL, secret);
    assert.equal(res.status, 200);
    const id = res.headers.get('x-request-id')!;
    const lines = await waitFor(
      "the request's log line",
      async () => {
        const found = system.gateway!.output.split('\n').filter((l) => l.includes(id));
        return found.length ? found : undefined;
      },
      5000,
    );
    assert.equal(lines.length, 1, lines.join('\n'));
    const entry = JSON.parse(lines[0]);
    assert.equal(entry.level, 30);
    assert.equal(entry.reqId, id);
    assert.equal(entry.method, 'POST');
    assert.equal(entry.route, '/models/*id');
    assert.equal(entry.path, `/models/${MODEL}`);
    assert.equal(entry.status, 200);
    assert.ok(typeof entry.duration_ms === 'number' && entry.duration_ms > 0, lines[0]);
    assert.equal(entry.service, 'gateway');
    assert.ok(!system.gateway!.output.includes(secret), 'request bodies are never logged');

    // Probes and scrapes are logged below info, so a gateway at info shows none of them.
    const quiet = system.gateway!.output.split('\n').filter((l) => /"route":"\/(ready|health|metrics)"/.test(l));
    assert.deepEqual(quiet, []);
    const unknown = system.gateway!.output.split('\n').find((l) => l.includes('"path":"/no/such/route"'));
    assert.ok(unknown, 'unknown routes are logged');
    assert.equal(JSON.parse(unknown).status, 404);
  });
});
