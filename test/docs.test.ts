/**
 * Issue 44: every example in README.md and in docs/ works as written. This test starts the system
 * the README's set-up command describes, runs each example with the real curl, and checks each
 * answer against what the doc shows.
 *
 * The conventions an example follows, in README.md and in every Markdown file under docs/:
 * - A fenced block opened with ```sh holds examples that this test runs. A block that is not to be
 *   run (an install, `npm start`, docker, kubectl, anything needing another set-up) has
 *   `<!-- docs-test: not run (why) -->` as the last non-blank line before its opening fence. Blocks
 *   in any other language (text, js, python, yaml) are never run.
 * - In a block that runs, each line that is not blank and not a comment (`#`) starts a command,
 *   and a line ending in `\` continues it onto the next line. Every command is one curl call to
 *   `localhost:8000`. The test runs it with bash, pointed at its own gateway, and has curl report
 *   the answer's status.
 * - An answer must have a 2xx status and a body; a body that starts with `[` or `{` must be JSON.
 * - A comment line right after a command is the output the doc shows when it starts with `[` or
 *   `{`, or with a status then a space (`# 404 {"error": …}`; the status then replaces the 2xx
 *   check). The answer must match it: `…` stands for any text, a number written with `…` right
 *   after it (`0.576…`) must be within NUMBER_TOLERANCE of the server's where the command names
 *   only models served in fp32, and any number elsewhere: a q8 model's digits depend on the CPU's
 *   int8 kernels (one input scored 0.576 on one of these machines and 0.630 on another). Everything
 *   else must be equal, except that whitespace may differ. Any other comment line is prose.
 *
 * The system: one worker for each model in the MODEL list of the README's set-up command (its
 * first sh block that runs `npm start`), loaded from MODEL_DIR, and a gateway whose DEFAULT_MODEL
 * is the first of them, as `npm start` sets it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { ReadyBody } from '@tserve/contract';
import { TestSystem, sleep, uniquePrefix, type Proc } from './helpers/system.ts';
import { curlExample, docExamples, readmeModels, type Example } from './helpers/doc-examples.ts';

/** How far a number the docs show with `…` may be from the server's, in an answer of an fp32 model. */
const NUMBER_TOLERANCE = 0.01;

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/\s+/g, '\\s*');

/** Throws unless `answer` matches the output a doc shows (see the conventions above). */
function assertShown(shown: string, answer: string, where: string, exactDigits: boolean): void {
  const approximate: number[] = [];
  let pattern = '';
  for (const part of shown.split(/(-?\d+(?:\.\d+)?…|…)/)) {
    if (part === '…') pattern += '[\\s\\S]*?';
    else if (part.endsWith('…')) {
      approximate.push(Number(part.slice(0, -1)));
      pattern += '(-?\\d+(?:\\.\\d+)?(?:[eE][-+]?\\d+)?)';
    } else pattern += escape(part);
  }
  const match = new RegExp(`^\\s*${pattern}\\s*$`).exec(answer);
  assert.ok(
    match,
    `${where}: the answer is not what the doc shows\n  shown: ${shown}\n answer: ${answer.slice(0, 3000)}`,
  );
  approximate.forEach((want, k) => {
    if (!exactDigits) return;
    const got = Number(match[k + 1]);
    assert.ok(
      Math.abs(got - want) <= NUMBER_TOLERANCE,
      `${where}: the doc shows ${want}…, the server answered ${got}\n answer: ${answer.slice(0, 3000)}`,
    );
  });
}

/** Runs one example against the gateway at `port` and checks its answer. */
async function runExample(example: Example, port: number, fp32: Set<string>): Promise<void> {
  const { status, body } = await curlExample(example, port);
  const expected = example.shown?.status;
  if (expected)
    assert.equal(
      status,
      expected,
      `${example.where}: status ${status}, the doc shows ${expected}: ${body.slice(0, 1000)}`,
    );
  else assert.ok(status >= 200 && status < 300, `${example.where}: status ${status}: ${body.slice(0, 1000)}`);
  assert.ok(body.trim(), `${example.where}: an empty answer`);
  if (/^\s*[[{]/.test(body))
    assert.doesNotThrow(() => JSON.parse(body), `${example.where}: the answer is not JSON: ${body.slice(0, 1000)}`);
  const named = example.command.match(/replica\/[\w.-]+/g) ?? [];
  const exactDigits = named.length > 0 && named.every((model) => fp32.has(model));
  if (example.shown) assertShown(example.shown.body, body, example.where, exactDigits);
}

/**
 * Waits until the gateway sees the model's worker. A model id the README gets wrong fails at once,
 * with the worker's own words, rather than at the end of a long wait.
 */
async function servedBy(system: TestSystem, model: string, worker: Proc): Promise<void> {
  const fail = (why: string) =>
    new Error(`${model}, from the README's MODEL list: ${why}\n${worker.output.slice(-2000)}`);
  const until = Date.now() + 60_000;
  for (;;) {
    if (!worker.running) throw fail('its worker exited');
    const ready = (await (await fetch(`${system.url}/ready`)).json()) as ReadyBody;
    if ((ready.models[model]?.workers ?? 0) > 0) return;
    if (Date.now() > until) throw fail('no worker served it within 60 s');
    await sleep(100);
  }
}

const DOCS = docExamples();
const README_EXAMPLES = DOCS.find((d) => d.file === 'README.md')?.examples ?? [];

describe("the docs' examples, run as written", () => {
  const models = readmeModels();
  const system = new TestSystem(uniquePrefix('docs'));

  /** The models served in fp32, whose digits the docs' numbers must match. */
  const fp32 = new Set<string>();

  before(async () => {
    await system.startGateway({ DEFAULT_MODEL: models[0] });
    const workers = models.map((model) => ({ model, worker: system.startWorker({ model }) }));
    for (const { model, worker } of workers) await servedBy(system, model, worker);
    const ready = (await (await fetch(`${system.url}/ready`)).json()) as ReadyBody;
    for (const model of models) if (ready.models[model].devices?.every((d) => d.endsWith('/fp32'))) fp32.add(model);
  });
  after(() => system.stop());

  it('the README shows one example of each protocol, each with its output', () => {
    const call = (route: RegExp) => README_EXAMPLES.filter((e) => route.test(e.command) && e.shown);
    assert.ok(call(/localhost:8000\/(\s|$)/).length, 'POST /');
    assert.ok(call(/localhost:8000\/models\//).length, 'the Hugging Face Inference API');
    assert.ok(call(/localhost:8000\/v1\/embeddings/).length, 'OpenAI embeddings');
    assert.ok(call(/localhost:8000\/(embed|predict|rerank|tokenize|info)\b/).length, 'TEI');
    assert.ok(call(/localhost:8000\/v2\//).length, 'KServe v2');
  });

  for (const { file, examples } of DOCS) {
    describe(file, () => {
      for (const example of examples) {
        it(`${example.where} ${example.command.split('\n')[0].slice(0, 90)}`, () =>
          runExample(example, system.port, fp32));
      }
    });
  }

  it('fails an example whose model id is wrong, or whose answer is not what the doc shows', async () => {
    // The first example that names a model and shows a number in its output, spoiled three ways.
    const example = DOCS.flatMap((d) => d.examples).find(
      (e) => /replica\//.test(e.command) && e.shown && /\d\.\d+…/.test(e.shown.body),
    );
    assert.ok(example?.shown, 'the docs show the output of an example that names a model');
    await runExample(example, system.port, fp32);
    const wrongModel = { ...example, command: example.command.replace(/replica\/[\w.-]+/, '$&-missing') };
    await assert.rejects(runExample(wrongModel, system.port, fp32), /status 404/);
    const wrongText = { ...example, shown: { body: example.shown.body.replace(/[A-Za-z]/, 'Q') } };
    await assert.rejects(runExample(wrongText, system.port, fp32), /not what the doc shows/);
    // Its digits, checked as an fp32 model's are, refuse a number half a unit off.
    const number = /(\d\.\d+)…/.exec(example.shown.body)!;
    const wrongNumber = {
      ...example,
      shown: { body: example.shown.body.replace(number[0], `${Number(number[1]) + 0.5}…`) },
    };
    const exact = new Set(example.command.match(/replica\/[\w.-]+/g));
    await assert.rejects(runExample(wrongNumber, system.port, exact), /the doc shows \d/);
  });
});
