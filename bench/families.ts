/**
 * The families beyond BERT (issue 84): one call at a time, at 16 and 128 tokens, through the whole
 * system (HTTP, gateway, Redis, worker) against the same q8 file called in this process with
 * transformers.js (tokenize, one model call, the head's own reading: pooling, a pair's logit). The
 * two never run at once. The replicas are scaled down (hidden 64, 2-3 layers), so a model call is
 * short and the figures show the path's cost more than the model's.
 * Usage: npm run bench:families [-- --calls 50]
 */
import { parseArgs } from 'node:util';
import { AutoModel, AutoModelForSequenceClassification, AutoTokenizer, env, Tensor } from '@huggingface/transformers';
import { BenchSystem } from './lib/system.ts';
import { craftText, loadTokenizer } from './lib/texts.ts';
import { summarize, type Summary } from './lib/stats.ts';
import { MODEL_DIR } from '../test/helpers/processes.ts';

const { values } = parseArgs({ options: { calls: { type: 'string', default: '50' } } });
const calls = Number(values.calls);
const LENGTHS = [16, 128];

/** Each family's route, and what its request carries: a text, or a pair's second text. */
const FAMILIES: Array<{ model: string; kind: 'embed' | 'rerank' | 'zero-shot' }> = [
  // The BERT embedder the project served before, as the baseline of the same run.
  { model: 'replica/all-MiniLM-L6-v2', kind: 'embed' },
  { model: 'replica/bge-small-en-v1.5', kind: 'embed' },
  { model: 'replica/Qwen3-Embedding-0.6B', kind: 'embed' },
  { model: 'replica/embeddinggemma-300m', kind: 'embed' },
  { model: 'replica/multilingual-e5-small', kind: 'embed' },
  { model: 'replica/gte-modernbert-base', kind: 'embed' },
  { model: 'replica/bge-reranker-v2-m3', kind: 'rerank' },
  { model: 'replica/deberta-v3-base-zeroshot-v2.0', kind: 'zero-shot' },
];
const QUERY = 'a friendly waiter';
const LABEL = 'travel';

async function timed(call: () => Promise<unknown>): Promise<Summary> {
  for (let i = 0; i < Math.max(5, calls / 10); i++) await call();
  const times: number[] = [];
  for (let i = 0; i < calls; i++) {
    const started = performance.now();
    await call();
    times.push(performance.now() - started);
  }
  return summarize(times);
}

/** The request each family's route takes for one text. */
function request(model: string, kind: string, text: string): [string, unknown] {
  if (kind === 'rerank') return ['/rerank', { model, query: QUERY, texts: [text], raw_scores: true }];
  if (kind === 'zero-shot') return [`/models/${model}`, { inputs: text, parameters: { candidate_labels: [LABEL] } }];
  return ['/embed', { model, inputs: [text] }];
}

/** The same work in this process: the text (or the pair) tokenized, one model call, its output read. */
async function inProcess(model: string, kind: string): Promise<(text: string) => Promise<unknown>> {
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  env.localModelPath = `${MODEL_DIR}/`;
  const tokenizer = await AutoTokenizer.from_pretrained(model);
  const auto = kind === 'embed' ? AutoModel : AutoModelForSequenceClassification;
  const session = await auto.from_pretrained(model, { dtype: 'q8' });
  return async (text) => {
    const inputs =
      kind === 'rerank'
        ? tokenizer(QUERY, { text_pair: text })
        : kind === 'zero-shot'
          ? tokenizer(text, { text_pair: `This example is ${LABEL}.` })
          : tokenizer(text);
    const n = inputs.input_ids.dims[1];
    const outputs = (await session({
      ...inputs,
      position_ids: new Tensor(
        'int64',
        BigInt64Array.from({ length: n }, (_, i) => BigInt(i)),
        [1, n],
      ),
    })) as Record<string, Tensor>;
    const main = outputs.sentence_embedding ?? outputs.logits ?? outputs.last_hidden_state;
    return Array.from(main.data as Float32Array).slice(0, 64);
  };
}

const system = new BenchSystem({ modelDir: MODEL_DIR, logLevel: 'error' });
const rows: Array<{ model: string; tokens: number; server: Summary; local: Summary }> = [];
const texts = new Map<string, string[]>();
for (const { model } of FAMILIES) {
  const tokenizer = await loadTokenizer(model, MODEL_DIR);
  texts.set(
    model,
    LENGTHS.map((n) => craftText(tokenizer, n)),
  );
}
const server = new Map<string, Summary>();
try {
  await system.startRedis();
  await system.startGateway();
  for (const { model, kind } of FAMILIES) {
    // q8, as in this process; only this model's worker runs while it is measured.
    await system.startWorker(model, { DTYPE: 'q8' });
    for (const [i, text] of texts.get(model)!.entries()) {
      const [pathname, body] = request(model, kind, text);
      server.set(
        `${model} ${LENGTHS[i]}`,
        await timed(async () => {
          const res = await fetch(`${system.url}${pathname}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(body),
          });
          if (!res.ok) throw new Error(`${pathname}: ${res.status} ${await res.text()}`);
          return res.json();
        }),
      );
    }
    await system.workers.get(model)?.stop('SIGTERM');
  }
} finally {
  await system.stop();
}
// After the server stopped: both use every core.
for (const { model, kind } of FAMILIES) {
  const local = await inProcess(model, kind);
  for (const [i, text] of texts.get(model)!.entries())
    rows.push({
      model,
      tokens: LENGTHS[i],
      server: server.get(`${model} ${LENGTHS[i]}`)!,
      local: await timed(() => local(text)),
    });
}

const f = (v: number) => v.toFixed(2).padStart(7);
console.log(`${calls} sequential calls each, q8 files; p50 and p99 in ms`);
console.log(`${'model'.padEnd(40)} tokens  system p50  p99   in-process p50  p99   overhead p50`);
for (const r of rows)
  console.log(
    `${r.model.padEnd(40)} ${String(r.tokens).padStart(6)} ${f(r.server.p50)} ${f(r.server.p99)}   ${f(r.local.p50)} ${f(r.local.p99)}   +${(r.server.p50 - r.local.p50).toFixed(2)}`,
  );
