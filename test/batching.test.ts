/**
 * Issue 3: deadline-bounded dynamic batching in real worker processes against real Redis.
 * Most cases fill the queue before the worker starts, so what the worker gathers is known exactly;
 * each outcome reports the size of the model call that ran it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ReadyBody, RequestOutcome } from '@tserve/contract';
import { MODEL_DIR, TestSystem, uniquePrefix, REDIS_URL, sleep, waitFor } from './helpers/system.ts';
import { QueueClient, textOfTokens } from './helpers/queue-client.ts';
import { CLASSIFIER as MODEL, SLOW_CLASSIFIER } from './helpers/replicas.ts';

async function withPrefilledQueue(
  name: string,
  workerEnv: Record<string, string | number>,
  fill: (q: QueueClient) => Promise<string[]>,
  model = MODEL,
): Promise<{ outcomes: RequestOutcome[]; system: TestSystem }> {
  const system = new TestSystem(uniquePrefix(name));
  const queue = new QueueClient(REDIS_URL, system.prefix, model);
  await queue.start();
  try {
    const ids = await fill(queue);
    system.startWorker({ model, env: { DTYPE: 'fp32', ...workerEnv } });
    const outcomes = await Promise.all(ids.map((id) => queue.outcome(id)));
    return { outcomes, system };
  } catch (err) {
    throw new Error(`${String(err)}\n${system.logs()}`);
  } finally {
    await queue.close();
  }
}

const sizes = (outcomes: RequestOutcome[]) => outcomes.map((o) => (o.ok ? o.timing.batch_size : -1));

describe('batch formation', () => {
  it('caps a batch at BATCH_MAX_SIZE and fills it from a deep queue', async (t) => {
    const { outcomes, system } = await withPrefilledQueue('size-cap', { BATCH_MAX_SIZE: 4 }, (q) =>
      Promise.all(Array.from({ length: 20 }, (_, i) => q.add([`text number ${i}`]))),
    );
    t.after(() => system.stop());
    assert.ok(
      outcomes.every((o) => o.ok),
      JSON.stringify(outcomes.find((o) => !o.ok)),
    );
    assert.deepEqual(sizes(outcomes), Array(20).fill(4));
  });

  it('stops gathering at the one deadline after the first job (BATCH_MAX_WAIT_MS=0: an idle worker runs the first job alone)', async (t) => {
    const { outcomes, system } = await withPrefilledQueue(
      'deadline',
      { BATCH_MAX_SIZE: 32, BATCH_MAX_WAIT_MS: 0 },
      (q) => Promise.all(Array.from({ length: 8 }, (_, i) => q.add([`text number ${i}`]))),
    );
    t.after(() => system.stop());
    // Seven more were waiting, yet the first ran alone: gathering ended at its deadline. The next
    // batch was formed while that call ran; whether the rest joined it depends on which finished
    // first, the call or the fetch, so only its bounds are fixed.
    assert.equal(sizes(outcomes)[0], 1);
    for (const size of sizes(outcomes).slice(1)) assert.ok(size >= 1 && size <= 7, `later batch of ${size}`);
  });

  it('gathers everything waiting before the deadline', async (t) => {
    // Each job costs BullMQ a Lua script to fetch (~0.3 ms here), so the test's deadline is generous.
    const { outcomes, system } = await withPrefilledQueue(
      'gather',
      { BATCH_MAX_SIZE: 32, BATCH_MAX_WAIT_MS: 1000 },
      (q) => Promise.all(Array.from({ length: 8 }, (_, i) => q.add([`text number ${i}`]))),
    );
    t.after(() => system.stop());
    assert.deepEqual(sizes(outcomes), Array(8).fill(8));
  });

  it('does not wait for company when nothing else is queued', async (t) => {
    // A deadline far longer than the test's patience: a batcher that idled until it would fail here.
    const system = new TestSystem(uniquePrefix('no-idle'));
    t.after(() => system.stop());
    await system.startGateway();
    system.startWorker({ model: MODEL, env: { BATCH_MAX_WAIT_MS: 20_000 } });
    await system.waitForWorkers(MODEL);
    for (let i = 0; i < 3; i++) {
      // Answered (200, not 504) within a 10 s deadline, half the batching deadline.
      const res = await system.infer(MODEL, `lonely request ${i}`, undefined, { options: { timeout_ms: 10_000 } });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      assert.equal(res.headers.get('x-batch-size'), '1');
    }
  });

  it('caps a model call by padded tokens (BATCH_MAX_TOKENS)', async (t) => {
    const text = textOfTokens(16);
    const { outcomes, system } = await withPrefilledQueue(
      'token-cap',
      { BATCH_MAX_SIZE: 32, BATCH_MAX_TOKENS: 64, BATCH_MAX_WAIT_MS: 1000 },
      (q) => Promise.all(Array.from({ length: 8 }, () => q.add([text]))),
    );
    t.after(() => system.stop());
    // 64 padded tokens hold four 16-token sequences.
    assert.deepEqual(sizes(outcomes), Array(8).fill(4));
  });

  it('groups by length: one long input does not pad the short ones', async (t) => {
    const short = textOfTokens(16);
    const long = textOfTokens(400);
    const { outcomes, system } = await withPrefilledQueue(
      'grouping',
      { BATCH_MAX_SIZE: 32, BATCH_MAX_WAIT_MS: 1000 },
      async (q) => {
        const ids = await Promise.all(Array.from({ length: 15 }, () => q.add([short])));
        ids.splice(7, 0, await q.add([long]));
        ids.push(...(await Promise.all(Array.from({ length: 16 }, () => q.add([short])))));
        return ids;
      },
    );
    t.after(() => system.stop());
    const s = sizes(outcomes);
    assert.equal(s[7], 1, 'the long input runs in a call of its own');
    assert.deepEqual(
      s.filter((_, i) => i !== 7),
      Array(31).fill(31),
      'the 31 short inputs share one call',
    );
  });

  it('runs interactive work between the model calls of batch-class work, not after all of them', async (t) => {
    const system = new TestSystem(uniquePrefix('precedence'));
    const queue = new QueueClient(REDIS_URL, system.prefix, SLOW_CLASSIFIER);
    await queue.start();
    t.after(async () => {
      await queue.close();
      await system.stop();
    });
    // One batch-class request whose inputs run as thirty model calls of BATCH_MAX_SIZE rows.
    const [bulk] = await queue.addJob([{ inputs: Array(60).fill(textOfTokens(64)) }], true, true);
    const worker = system.startWorker({ model: SLOW_CLASSIFIER, env: { BATCH_MAX_SIZE: 2 } });
    await waitFor('the batch-class job taken', async () => (await queue.jobState(bulk)) === 'active', 60_000, 5);
    // The worker is stopped while the interactive job is added, so the batch-class one cannot end meanwhile.
    worker.kill('SIGSTOP');
    let urgent: string;
    try {
      [urgent] = await queue.addJob([{ inputs: ['me first'] }]);
    } finally {
      worker.kill('SIGCONT');
    }
    const first = await Promise.race([
      queue.outcome(urgent).then(() => 'interactive'),
      queue.outcome(bulk, 120_000).then(() => 'batch class'),
    ]);
    assert.equal(first, 'interactive', system.logs());
    const outcome = await queue.outcome(bulk, 120_000);
    assert.ok(outcome.ok && outcome.outputs.length === 60, JSON.stringify(outcome).slice(0, 300));
  });
});

describe('correctness under batching', () => {
  const system = new TestSystem(uniquePrefix('batched-equal'));
  const texts = [
    'This restaurant is awesome',
    'This restaurant is awful',
    'Paris is the [MASK] of France.',
    'My name is Sarah and I live in London',
    textOfTokens(40, 'food'),
    'short',
  ];

  before(async () => {
    await system.startGateway();
    system.startWorker({ model: MODEL, env: { DTYPE: 'fp32' } });
    await system.waitForWorkers(MODEL);
  });
  after(() => system.stop());

  it('a batched answer equals the answer for the same input alone (fp32)', async () => {
    const alone: Array<Array<{ label: string; score: number }>> = [];
    for (const text of texts) {
      const res = await system.infer(MODEL, text, { top_k: null });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('x-batch-size'), '1');
      // The Inference API answers one text as a list holding its labels.
      alone.push(res.body[0]);
    }
    const listed = await system.infer(MODEL, texts, { top_k: null });
    assert.equal(listed.status, 200);
    assert.ok(Number(listed.headers.get('x-batch-size')) > 1, 'the list ran batched');
    const concurrent = await Promise.all(texts.map((t) => system.infer(MODEL, t, { top_k: null })));
    const maxDiff = (a: any[], b: any[]) =>
      Math.max(...a.map((r, i) => (assert.equal(r.label, b[i].label), Math.abs(r.score - b[i].score))));
    texts.forEach((text, i) => {
      // fp32 with an attention mask: padding changes nothing but float summation order.
      assert.ok(
        maxDiff(listed.body[i], alone[i]) < 1e-6,
        `"${text}" in a list: ${JSON.stringify(listed.body[i])} vs ${JSON.stringify(alone[i])}`,
      );
      assert.ok(maxDiff(concurrent[i].body[0], alone[i]) < 1e-6, `"${text}" concurrent`);
    });
  });
});

/** Throws unless two answers are equal but for their numbers, each within `tolerance`. */
function assertClose(a: unknown, b: unknown, tolerance: number): void {
  const numbers: number[][] = [[], []];
  const [x, y] = [a, b].map((answer, k) =>
    JSON.stringify(answer, (_key, value) => (typeof value === 'number' ? (numbers[k].push(value), 0) : value)),
  );
  assert.equal(x, y, 'labels or shapes differ');
  const largest = Math.max(0, ...numbers[0].map((v, i) => Math.abs(v - numbers[1][i])));
  assert.ok(largest <= tolerance, `a number differs by ${largest}`);
}

describe("client batches larger than a worker's batch", () => {
  const system = new TestSystem(uniquePrefix('client-batch'));
  const LIMIT = 4;
  const texts = Array.from({ length: 4 * LIMIT }, (_, i) => `review number ${i}: ${'good '.repeat(i % 5)}food`);
  const pieces = Array.from({ length: 4 }, (_, i) => texts.slice(i * LIMIT, (i + 1) * LIMIT));

  before(async () => {
    await system.startGateway();
    system.startWorker({ model: MODEL, env: { DTYPE: 'fp32', BATCH_MAX_SIZE: LIMIT } });
    await system.waitForWorkers(MODEL);
  });
  after(() => system.stop());

  /** Each route, as a function from texts to one answer per text, in order, and the largest model call that answered. */
  const routes: Array<{ name: string; answers: (texts: string[]) => Promise<{ answers: unknown[]; batch: number }> }> =
    [
      {
        name: 'the Inference API',
        answers: async (inputs) => {
          const res = await system.infer(MODEL, inputs, { top_k: null });
          assert.equal(res.status, 200, JSON.stringify(res.body));
          return { answers: res.body, batch: Number(res.headers.get('x-batch-size')) };
        },
      },
      {
        name: "TEI's /predict",
        answers: async (inputs) => {
          const res = await system.post('/predict', { inputs, raw_scores: true });
          assert.equal(res.status, 200, JSON.stringify(res.body));
          return { answers: res.body, batch: Number(res.headers.get('x-batch-size')) };
        },
      },
      {
        name: 'KServe v2',
        answers: async (inputs) => {
          const res = await system.post(`/v2/models/${MODEL}/infer`, {
            inputs: [{ name: 'text', shape: [inputs.length], datatype: 'BYTES', data: inputs }],
            outputs: [{ name: 'logits' }],
          });
          assert.equal(res.status, 200, JSON.stringify(res.body));
          const [logits] = res.body.outputs as Array<{ shape: number[]; data: number[] }>;
          const width = logits.shape[1];
          return {
            answers: inputs.map((_t, i) => logits.data.slice(i * width, (i + 1) * width)),
            batch: Number(res.headers.get('x-batch-size')),
          };
        },
      },
    ];

  for (const route of routes) {
    it(`${route.name}: ${4 * LIMIT} inputs answered in one response, as the same inputs sent in pieces`, async () => {
      const whole = await route.answers(texts);
      assert.equal(whole.answers.length, texts.length);
      assert.ok(whole.batch <= LIMIT, `a model call of ${whole.batch} rows; BATCH_MAX_SIZE is ${LIMIT}`);
      const inPieces = [];
      for (const piece of pieces) inPieces.push(...(await route.answers(piece)).answers);
      // fp32 with an attention mask: other batch mates change nothing but float summation order.
      assertClose(whole.answers, inPieces, 1e-6);
    });
  }

  it('beyond MAX_INPUTS_PER_REQUEST a request is refused with a 413 naming the limit', async () => {
    const res = await system.infer(MODEL, Array(2049).fill('x'));
    assert.equal(res.status, 413, JSON.stringify(res.body));
    assert.match(res.body.error, /2049 inputs in one request; at most 2048 are accepted \(MAX_INPUTS_PER_REQUEST\)/);
  });
});

/**
 * MODEL as a model whose config does not state its position table (max_position_embeddings), as
 * some configs do not: the worker cannot refuse an over-long input before the model call, so the
 * call fails (the ONNX graph's table still has 512 rows) and the culprit is found by halving it.
 * Its files are MODEL's own, linked into a folder the test removes.
 */
function modelWithPositionsUnstated(t: { after: (fn: () => void) => void }): { id: string; modelDir: string } {
  const modelDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-models-'));
  t.after(() => fs.rmSync(modelDir, { recursive: true, force: true }));
  const id = `${MODEL}-positions-unstated`;
  const source = path.join(MODEL_DIR, MODEL);
  const target = path.join(modelDir, id);
  fs.mkdirSync(target, { recursive: true });
  for (const entry of fs.readdirSync(source)) {
    if (entry !== 'config.json') fs.symlinkSync(path.join(source, entry), path.join(target, entry));
  }
  const config = JSON.parse(fs.readFileSync(path.join(source, 'config.json'), 'utf8'));
  delete config.max_position_embeddings;
  fs.writeFileSync(path.join(target, 'config.json'), JSON.stringify(config));
  return { id, modelDir };
}

describe('failures inside a batch', () => {
  it('isolates an input that breaks the model; its neighbours get their answers', async (t) => {
    // 600 tokens with truncation off overflow the 512-position table: ONNX Runtime fails the whole call.
    const culpritText = textOfTokens(600, 'word');
    const innocents = [480, 490, 500, 510, 470, 505].map((n) => textOfTokens(n, 'word'));
    const model = modelWithPositionsUnstated(t);
    let culprit = '';
    const { outcomes, system } = await withPrefilledQueue(
      'isolation',
      // debug: the worker logs each batch's model calls
      { BATCH_MAX_SIZE: 32, BATCH_MAX_WAIT_MS: 1000, MODEL_DIR: model.modelDir, LOG_LEVEL: 'debug' },
      async (q) => {
        const ids = [];
        for (const text of innocents.slice(0, 3)) ids.push(await q.add([text], { truncation: false }));
        culprit = await q.add([culpritText], { truncation: false });
        ids.push(culprit);
        for (const text of innocents.slice(3)) ids.push(await q.add([text], { truncation: false }));
        return ids;
      },
      model.id,
    );
    t.after(() => system.stop());
    const bad = outcomes.find((o) => o.id === culprit)!;
    assert.equal(bad.ok, false);
    assert.ok(!bad.ok && bad.error.error_type === 'validation', JSON.stringify(bad));
    assert.ok(!bad.ok && /600 tokens/.test(bad.error.error) && /512/.test(bad.error.error), JSON.stringify(bad));
    const good = outcomes.filter((o) => o.id !== culprit);
    assert.equal(good.length, innocents.length);
    for (const o of good) assert.ok(o.ok, `an innocent neighbour failed: ${JSON.stringify(o)}`);
    // They really shared a call with the culprit before it was split off. A batch's calls are
    // logged once it is done, after its outcomes went out: waited for until every job is counted.
    const batches = await waitFor('every job in a batch logged as done', async () => {
      const done = system.procs[0].output
        .split('\n')
        .filter((line) => line.includes('"batch done"'))
        .map((line) => JSON.parse(line) as { jobs: number; calls: number[] });
      return done.reduce((n, b) => n + b.jobs, 0) === outcomes.length && done;
    });
    const calls = batches.flatMap((b) => b.calls);
    assert.ok(
      calls.includes(innocents.length + 1),
      `a call of the culprit and all its neighbours, then its halves: ${JSON.stringify(calls)}`,
    );
    assert.ok(good.some((o) => o.ok && o.timing.batch_size > 1));
    assert.ok(system.procs[0].running, 'the worker survived');
  });

  it('with truncation on (the default) the long input is cut and says so', async (t) => {
    const system = new TestSystem(uniquePrefix('truncate'));
    t.after(() => system.stop());
    await system.startGateway();
    system.startWorker({ model: MODEL });
    await system.waitForWorkers(MODEL);
    const res = await system.infer(MODEL, textOfTokens(600, 'word'));
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const warnings = JSON.parse(res.headers.get('x-warnings') ?? '[]');
    assert.match(warnings[0], /truncated from 600 to 512 tokens/);
    // 750 KB of the same words is read only as far as the cut: the same answer, a lower bound.
    const long = await system.infer(MODEL, textOfTokens(150_000, 'word'));
    assert.equal(long.status, 200, JSON.stringify(long.body));
    assert.deepEqual(long.body, res.body);
    assert.match(JSON.parse(long.headers.get('x-warnings') ?? '[]')[0], /truncated from at least \d+ to 512 tokens/);
    const refused = await system.infer(MODEL, textOfTokens(600, 'word'), { truncation: false });
    assert.equal(refused.status, 400, JSON.stringify(refused.body));
    assert.match(refused.body.error, /600 tokens long but this model accepts at most 512/);
    // Not to be cut, 750 KB is read only as far as shows it too long: a lower bound again.
    const longRefused = await system.infer(MODEL, textOfTokens(150_000, 'word'), { truncation: false });
    assert.equal(longRefused.status, 400, JSON.stringify(longRefused.body));
    assert.match(longRefused.body.error, /^input is at least \d+ tokens long but this model accepts at most 512/);
  });

  it('drops jobs whose deadline passed without running them', async (t) => {
    const { outcomes, system } = await withPrefilledQueue('expired', {}, async (q) => {
      const expired = await Promise.all(Array.from({ length: 3 }, (_, i) => q.add([`late ${i}`], {}, -1)));
      const fresh = await q.add(['on time']);
      return [...expired, fresh];
    });
    t.after(() => system.stop());
    for (const o of outcomes.slice(0, 3)) {
      assert.ok(!o.ok && o.error.error_type === 'timeout', JSON.stringify(o));
      assert.match(!o.ok ? o.error.error : '', /deadline passed before the model ran/);
    }
    assert.ok(outcomes[3].ok, 'a job on time in the same batch still runs');
    assert.equal(outcomes[3].ok && outcomes[3].timing.batch_size, 1, 'expired jobs took no place in the model call');
  });
});

describe('jobs that carry several requests (coalesced by a gateway)', () => {
  it('answers each request of a job on its own: one fails, one expired, the others answered', async (t) => {
    let ids: string[] = [];
    const { outcomes, system } = await withPrefilledQueue(
      'multi',
      { BATCH_MAX_SIZE: 32, BATCH_MAX_WAIT_MS: 1000 },
      async (q) => {
        ids = await q.addJob([
          { inputs: ['first request'] },
          { inputs: [textOfTokens(600, 'word')], parameters: { truncation: false } },
          { inputs: ['too late'], deadlineInMs: -1 },
          { inputs: ['fourth request, two inputs', 'second input'], parameters: { top_k: null } },
        ]);
        return ids;
      },
    );
    t.after(() => system.stop());
    const [first, culprit, late, fourth] = outcomes;
    assert.ok(first.ok, JSON.stringify(first));
    assert.ok(
      !culprit.ok && culprit.error.error_type === 'validation' && /600 tokens/.test(culprit.error.error),
      JSON.stringify(culprit),
    );
    assert.ok(!late.ok && late.error.error_type === 'timeout', JSON.stringify(late));
    assert.ok(fourth.ok && fourth.outputs.length === 2 && Array.isArray(fourth.outputs[0]), JSON.stringify(fourth));
    assert.deepEqual(
      outcomes.map((o) => o.id),
      ids,
      "each outcome is its own request's",
    );
    // One job: its outcomes were published and recorded together, under the first request's id.
    // (recorded beside the publication, on another connection: wait for it, not on the clock)
    const stored = await waitFor('the job recorded as completed', () => system.jobReturnValue(MODEL, ids[0]), 10_000);
    assert.deepEqual(
      stored.outcomes.map((o: { id: string }) => o.id),
      ids,
    );
  });
});

describe('long batches', () => {
  it('keep the worker alive and its jobs locked while the model runs (inference off the event loop)', async () => {
    // A batch of 32 × 500 tokens on DistilBERT runs for seconds: far longer than the heartbeat TTL
    // and the job lock here. A worker whose event loop stalled during inference would drop out of
    // the registry and lose its locks, and its jobs would run twice.
    const model = SLOW_CLASSIFIER;
    const system = new TestSystem(uniquePrefix('long-batch'), REDIS_URL, { WORKER_TTL_MS: 1000 });
    const queue = new QueueClient(REDIS_URL, system.prefix, model);
    await queue.start();
    try {
      await system.startGateway();
      const worker = system.startWorker({
        model,
        env: {
          BATCH_MAX_SIZE: 32,
          BATCH_MAX_WAIT_MS: 1000,
          JOB_LOCK_MS: 1000,
          STALLED_INTERVAL_MS: 500,
          LOG_LEVEL: 'info',
        },
      });
      await system.waitForWorkers(model);
      const text = textOfTokens(500, 'long');
      const started = Date.now();
      const ids = await Promise.all(Array.from({ length: 32 }, () => queue.add([text])));
      let minWorkers = Infinity;
      let polling = true;
      const poll = (async () => {
        while (polling) {
          const body = (await (await fetch(`${system.url}/ready`)).json()) as ReadyBody;
          minWorkers = Math.min(minWorkers, body.models[model]?.workers ?? 0);
          await sleep(100);
        }
      })();
      const outcomes = await Promise.all(ids.map((id) => queue.outcome(id, 120_000)));
      polling = false;
      await poll;
      const elapsed = Date.now() - started;
      assert.ok(
        elapsed > 2000,
        `the batch ran longer than the TTL and the lock (${elapsed} ms), so the test means something`,
      );
      assert.ok(
        outcomes.every((o) => o.ok),
        JSON.stringify(outcomes.find((o) => !o.ok)),
      );
      assert.equal(minWorkers, 1, 'the worker never dropped out of the registry');
      assert.doesNotMatch(worker.output, /settling job failed|lock renewal failed/, 'no lock was lost');
    } finally {
      await queue.close();
      await system.stop();
    }
  });
});
