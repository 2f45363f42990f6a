/**
 * Issue 2: every model and input in ../shared/models/REFERENCE.json, through the real gateway,
 * queue and workers, gives the reference outputs (scores within 1e-4; same labels, tokens, order).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TestSystem, reference, uniquePrefix } from './helpers/system.ts';

const REF = reference();
const MODELS = Object.keys(REF);
const DEFAULT_MODEL = 'replica/MiniLM-L6-H384-uncased-sst2';
const TOL = 1e-4;

function close(actual: number, expected: number, what: string) {
  assert.ok(Math.abs(actual - expected) <= TOL, `${what}: ${actual} vs reference ${expected}`);
}

describe('reference outputs through the gateway', () => {
  const system = new TestSystem(uniquePrefix('reference'));

  before(async () => {
    await system.startGateway({ DEFAULT_MODEL });
    for (const model of MODELS) system.startWorker({ model });
    for (const model of MODELS) await system.waitForWorkers(model);
  });
  after(() => system.stop());

  for (const model of MODELS) {
    const { task, cases } = REF[model];
    it(`${model} (${task}) matches REFERENCE.json`, async () => {
      for (const c of cases) {
        if (task === 'text-classification') {
          const res = await system.infer(model, c.text, { top_k: null });
          assert.equal(res.status, 200, JSON.stringify(res.body));
          const expected = Object.entries(c.scores as Record<string, number>).sort((a, b) => b[1] - a[1]);
          assert.deepEqual(res.body.map((r: any) => r.label), expected.map(([label]) => label), c.text);
          res.body.forEach((r: any, i: number) => close(r.score, expected[i][1], `${model} "${c.text}" ${r.label}`));
        } else if (task === 'feature-extraction') {
          const res = await system.infer(model, c.text);
          assert.equal(res.status, 200, JSON.stringify(res.body));
          assert.equal(res.body.length, c.mean_pooled_normalized.length);
          res.body.forEach((v: number, i: number) => close(v, c.mean_pooled_normalized[i], `${model} "${c.text}" dim ${i}`));
        } else if (task === 'fill-mask') {
          const res = await system.infer(model, c.text, { top_k: 5 });
          if (c.top5.length === 0) {
            // No mask token in the text: the reference has nothing to predict, the server says what is wrong.
            assert.equal(res.status, 400, JSON.stringify(res.body));
            assert.equal(res.body.error_type, 'validation');
            assert.match(res.body.error, /\[MASK\]/);
            continue;
          }
          assert.equal(res.status, 200, JSON.stringify(res.body));
          assert.deepEqual(res.body.map((r: any) => [r.token, r.token_str]), c.top5.map((r: any) => [r.token, r.token_str]));
          res.body.forEach((r: any, i: number) => close(r.score, c.top5[i].score, `${model} "${c.text}" ${r.token_str}`));
          assert.equal(typeof res.body[0].sequence, 'string');
        } else if (task === 'token-classification') {
          const res = await system.infer(model, c.text, { ignore_labels: [] });
          assert.equal(res.status, 200, JSON.stringify(res.body));
          // The reference labels every position; the pipeline leaves out the template's [CLS] and [SEP].
          const expected = c.per_token.slice(1, -1);
          assert.deepEqual(res.body.map((e: any) => [e.word, e.entity]), expected.map((t: any) => [t.token, t.label]), c.text);
          res.body.forEach((e: any, i: number) => close(e.score, expected[i].score, `${model} "${c.text}" ${e.word}`));
          assert.deepEqual(res.body.map((e: any) => e.index), expected.map((_: unknown, i: number) => i + 1));
        } else {
          assert.fail(`no check for task ${task}`);
        }
      }
    });
  }

  it('POST / with a raw text body answers for the default model', async () => {
    for (const c of REF[DEFAULT_MODEL].cases) {
      const res = await fetch(`${system.url}/`, { method: 'POST', body: c.text, headers: { 'content-type': 'application/x-www-form-urlencoded' } });
      assert.equal(res.status, 200);
      const body = (await res.json()) as Array<{ label: string; score: number }>;
      const [label, score] = Object.entries(c.scores as Record<string, number>).sort((a, b) => b[1] - a[1])[0];
      assert.equal(body.length, 1);
      assert.equal(body[0].label, label);
      close(body[0].score, score, `POST / "${c.text}"`);
    }
  });

  it('a list of inputs returns the answers in the same order', async () => {
    const model = 'replica/all-MiniLM-L6-v2';
    const cases = REF[model].cases;
    const inputs = [...cases, ...cases.slice().reverse()].map((c) => c.text);
    const res = await system.infer(model, inputs);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    assert.equal(res.body.length, inputs.length);
    const cosine = (a: number[], b: number[]) => a.reduce((s, v, i) => s + v * b[i], 0);
    inputs.forEach((text, i) => {
      // Batched with neighbours a q8 model's output shifts slightly, so each answer is matched to
      // the nearest reference embedding: it must be its own input's, by a clear margin.
      const similarities = cases.map((c) => cosine(res.body[i], c.mean_pooled_normalized));
      const own = cases.findIndex((c) => c.text === text);
      const best = similarities.indexOf(Math.max(...similarities));
      assert.equal(best, own, `inputs[${i}] is closest to "${cases[best].text}", not its own text`);
      assert.ok(similarities[own] > 0.95, `inputs[${i}] cosine to its reference ${similarities[own]}`);
    });
  });
});
