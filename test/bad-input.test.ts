/**
 * Issue 4, bad input: every mistake gets a JSON 4xx `{"error", "error_type"}` that says what to fix,
 * never a stack trace, and the gateway and the worker stay up.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { TestSystem, uniquePrefix, waitFor } from './helpers/system.ts';
import { textOfTokens } from './helpers/queue-client.ts';
import { CLASSIFIER, EMBEDDER, FILL_MASK } from './helpers/replicas.ts';

describe('bad input', () => {
  const system = new TestSystem(uniquePrefix('bad-input'));

  before(async () => {
    await system.startGateway({ MAX_INPUTS_PER_REQUEST: 8, MAX_BODY_BYTES: 20_000 });
    system.startWorker({ model: CLASSIFIER });
    system.startWorker({ model: FILL_MASK });
    // 4,000 numbers: one 384-wide vector per token for 10 tokens.
    system.startWorker({ model: EMBEDDER, env: { MAX_ANSWER_VALUES: 4000 } });
    await system.waitForWorkers(CLASSIFIER);
    await system.waitForWorkers(FILL_MASK);
    await system.waitForWorkers(EMBEDDER);
  });
  after(() => system.stop());

  async function expectError(
    res: Promise<{ status: number; body: any; headers: Headers }>,
    status: number,
    type: string,
    message: RegExp,
  ) {
    const r = await res;
    assert.equal(r.status, status, JSON.stringify(r.body));
    assert.equal(typeof r.body, 'object', `body is JSON: ${r.body}`);
    assert.deepEqual(Object.keys(r.body).sort(), ['error', 'error_type']);
    assert.equal(r.body.error_type, type);
    assert.match(r.body.error, message);
    assert.doesNotMatch(r.body.error, /\n\s+at |node_modules|\.ts:\d+|\.js:\d+/, 'no stack trace');
  }

  const raw = (body: string | Uint8Array, contentType = 'application/json', headers: Record<string, string> = {}) =>
    fetch(`${system.url}/models/${CLASSIFIER}`, {
      method: 'POST',
      headers: { 'content-type': contentType, ...headers },
      body,
    }).then(async (r) => ({
      status: r.status,
      headers: r.headers,
      body: await r.json().catch(() => r.statusText),
    }));

  it('malformed JSON → 400', () => expectError(raw('{"inputs": "x"'), 400, 'validation', /malformed JSON/));
  it('wrong content type → 415', () =>
    expectError(raw('inputs=x', 'text/plain'), 415, 'unsupported_media_type', /application\/json/));
  it('missing inputs → 400', () =>
    expectError(system.post(`/models/${CLASSIFIER}`, { parameters: {} }), 400, 'validation', /inputs/));
  it('empty inputs → 400', () => expectError(system.infer(CLASSIFIER, ''), 400, 'validation', /empty/));
  it('empty list → 400', () => expectError(system.infer(CLASSIFIER, []), 400, 'validation', /empty list/));
  it('non-string inputs → 400', () => expectError(system.infer(CLASSIFIER, 42), 400, 'validation', /inputs/));
  it('non-string list item → 400', () =>
    expectError(system.infer(CLASSIFIER, ['ok', 7]), 400, 'validation', /inputs\.1/));
  /** A request answered 200 whose unknown fields were left out and named, as unknown fields always are. */
  async function expectIgnored(res: Promise<{ status: number; body: any; headers: Headers }>, fields: string) {
    const r = await res;
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.headers.get('x-ignored-fields'), fields);
  }
  it('unknown top-level field → left out and named, never refused', () =>
    expectIgnored(system.post(`/models/${CLASSIFIER}`, { inputs: 'x', input: 'y' }), 'input'));
  it('unknown parameter → left out and named', () =>
    expectIgnored(system.infer(CLASSIFIER, 'x', { top_p: 3 }), 'parameters.top_p'));
  it('ill-typed parameter → 400', () =>
    expectError(system.infer(CLASSIFIER, 'x', { top_k: 'three' }), 400, 'validation', /parameters\.top_k/));
  it('a parameter of another task → left out and named: it means nothing to this one', () =>
    expectIgnored(system.infer(CLASSIFIER, 'x', { pooling: 'mean' }), 'parameters.pooling'));
  it('ill-typed options → 400', () =>
    expectError(
      system.post(`/models/${CLASSIFIER}`, { inputs: 'x', options: { timeout_ms: -5 } }),
      400,
      'validation',
      /options\.timeout_ms/,
    ));
  it('fill-mask without the mask token → 400', () =>
    expectError(system.infer(FILL_MASK, 'no mask here'), 400, 'validation', /\[MASK\]/));
  it('fill-mask list with one bad item names it', () =>
    expectError(system.infer(FILL_MASK, ['a [MASK] b', 'none']), 400, 'validation', /inputs\[1\].*\[MASK\]/));
  it('fill-mask asking more than 1000 candidates (masks × top_k) → 400', () =>
    expectError(
      system.infer(FILL_MASK, 'a [MASK] b [MASK] c', { top_k: 501 }),
      400,
      'validation',
      /2 mask tokens and top_k is 501: 1002 candidates, at most 1000/,
    ));
  it('an answer of more numbers than MAX_ANSWER_VALUES → 413, before the model runs', async () => {
    // 6 and 7 tokens, specials included: 13 vectors of 384.
    const inputs = ['a few words here', 'and a few words there'];
    await expectError(
      system.infer(EMBEDDER, inputs, { pooling: 'none' }),
      413,
      'payload_too_large',
      /would hold 4992 numbers; at most 4000 .*MAX_ANSWER_VALUES.*pool/,
    );
    const pooled = await system.infer(EMBEDDER, inputs);
    assert.equal(pooled.status, 200, JSON.stringify(pooled.body));
  });
  it('too many list items → 413', () =>
    expectError(system.infer(CLASSIFIER, Array(9).fill('x')), 413, 'payload_too_large', /9 inputs.*at most 8/));
  it('body over the size limit → 413', () =>
    expectError(system.infer(CLASSIFIER, 'x'.repeat(30_000)), 413, 'payload_too_large', /larger than 20000 bytes/));
  it('text longer than the model with truncation off → 400', () =>
    expectError(
      system.infer(CLASSIFIER, textOfTokens(700, 'word'), { truncation: false }),
      400,
      'validation',
      /700 tokens long.*at most 512/,
    ));
  it('unknown model → 404 naming the served models', () =>
    expectError(
      system.infer('replica/nope', 'x'),
      404,
      'not_found',
      new RegExp(`replica/nope is not served.*${CLASSIFIER}`),
    ));
  it('POST / with several models served and no DEFAULT_MODEL → 400 naming them', () =>
    expectError(
      system.post('/', { inputs: 'x' }),
      400,
      'validation',
      new RegExp(`several models are served \\(.*${CLASSIFIER}.*\\); use POST /models/<model id> or set DEFAULT_MODEL`),
    ));
  it('unknown route → 404', async () => {
    const r = await fetch(`${system.url}/nothing-here`);
    assert.equal(r.status, 404);
    assert.equal(((await r.json()) as any).error_type, 'not_found');
  });
  it('invalid UTF-8 → 400', () =>
    expectError(
      raw(new Uint8Array([0x7b, 0x22, 0x69, 0x6e, 0x70, 0x75, 0x74, 0x73, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d])),
      400,
      'validation',
      /UTF-8/,
    ));
  it('invalid UTF-8 in a raw POST / body → 400', async () => {
    const r = await fetch(`${system.url}/`, { method: 'POST', body: new Uint8Array([0x68, 0x69, 0xc3, 0x28]) });
    assert.equal(r.status, 400);
    assert.match(((await r.json()) as any).error, /UTF-8/);
  });
  it('a compressed body → the same answer as plain', async () => {
    const r = await raw(gzipSync('{"inputs": "compressed"}'), 'application/json', { 'content-encoding': 'gzip' });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(r.body, await raw('{"inputs": "compressed"}').then((plain) => plain.body));
  });
  for (const [encoding, what, body] of [
    ['gzip', 'not gzip', 'not gzip at all'],
    ['gzip', 'cut short', gzipSync('{"inputs": "cut short"}').subarray(0, 12)],
    ['deflate', 'not deflate', 'not deflate'],
    ['br', 'not brotli', 'not brotli'],
  ] as const) {
    it(`a body that does not decompress as its content-encoding (${encoding}: ${what}) → 400`, () =>
      expectError(
        raw(body, 'application/json', { 'content-encoding': encoding }),
        400,
        'validation',
        new RegExp(`could not be decompressed \\(content-encoding ${encoding}\\)`),
      ));
  }
  it('POST / with an empty body → 400', async () => {
    const r = await fetch(`${system.url}/`, { method: 'POST', body: '' });
    assert.equal(r.status, 400);
    assert.equal(((await r.json()) as any).error_type, 'validation');
  });

  it('after all that, the gateway and the workers still answer', async () => {
    assert.ok(
      system.procs.every((p) => p.running),
      system.logs(),
    );
    const ok = await system.infer(CLASSIFIER, 'still here');
    assert.equal(ok.status, 200);
    const mask = await system.infer(FILL_MASK, 'still [MASK] here');
    assert.equal(mask.status, 200);
  });
});

/**
 * Issue 50: an input whose model call would not fit the worker's memory budget even alone is refused
 * 413 before any call runs, and a budget that cannot hold the model at rest stops the worker at
 * start-up with the reason, which the gateway reports, instead of the kernel killing it mid-batch.
 */
describe('a worker with a small memory budget', () => {
  const system = new TestSystem(uniquePrefix('memory-budget'));
  after(() => system.stop());

  it('refuses 413 an input too long for its budget, and answers the rest', async () => {
    await system.startGateway();
    // MiniLM holds about 230 MiB at rest: 330 leaves room for calls of a few hundred tokens, not 512.
    system.startWorker({ model: EMBEDDER, env: { WORKER_MEMORY_MB: 330 } });
    await system.waitForWorkers(EMBEDDER);
    const refused = await system.infer(EMBEDDER, ['a short one', textOfTokens(600, 'word')]);
    assert.equal(refused.status, 413, JSON.stringify(refused.body));
    assert.deepEqual(Object.keys(refused.body).sort(), ['error', 'error_type']);
    assert.equal(refused.body.error_type, 'payload_too_large');
    const stated =
      /^inputs\[1\]: input is 512 tokens long, but this worker's memory budget \(WORKER_MEMORY_MB\) holds model calls of at most (\d+) tokens per input/.exec(
        refused.body.error,
      );
    assert.ok(stated, refused.body.error);
    // The limit depends on what the process holds at rest, which varies from run to run; an input of
    // exactly that length is answered, so the limit the 413 states is one the worker keeps.
    const longest = Number(stated[1]);
    assert.ok(longest > 2 && longest < 512, `limit ${longest}`);
    const ok = await system.infer(EMBEDDER, ['a short one', textOfTokens(longest, 'word')]);
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.equal(await system.metric('tserve_worker_memory_budget_bytes', { model: EMBEDDER }), 330 * 2 ** 20);
  });

  it('a budget the model fills at rest: the worker exits saying so, and the gateway answers 503 with the reason', async () => {
    const worker = system.startWorker({ model: CLASSIFIER, env: { WORKER_MEMORY_MB: 200 } });
    assert.notEqual(await worker.exited, 0);
    assert.match(
      worker.output,
      /WORKER_MEMORY_MB=200 leaves no room for a model call: the worker holds about \d+ MiB at rest.*give it at least \d+/,
    );
    await waitFor(
      'the reason at the gateway',
      async () => {
        const r = await system.infer(CLASSIFIER, 'hello');
        return r.status === 503 && /WORKER_MEMORY_MB=200 leaves no room/.test(r.body.error);
      },
      10_000,
    );
  });
});
