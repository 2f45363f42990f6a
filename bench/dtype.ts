/**
 * int8-row against fp32 and per-tensor q8, in-process (`pipe(list)`, the model alone): speed in
 * interleaved rounds (each round runs every dtype once, so the shared machine's drift falls on all
 * alike), and answers against fp32 where the model has fp32 weights (label agreement over many texts;
 * embeddings' cosine for --embedder). `int8-row@fp32` and `int8-row@q8` name the file it is written
 * from; plain `int8-row` takes the worker's choice. --model-dir: a folder where each model has
 * onnx/model.onnx (scripts/fp32-from-q8.py writes one from a replica's q8 file).
 * Usage: npm run bench:dtype [-- --rounds 3 --seconds 3 --threads 1 --models a,b --model-dir dir]
 */
import { parseArgs } from 'node:util';
import { loadInProcess, measureBatched, type InProcessModel } from './lib/inprocess.ts';
import { MODEL_DIR } from '../test/helpers/processes.ts';

interface Loaded extends InProcessModel {
  /** The dtype as asked for, int8-row's source included. */
  name: string;
}

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '3' },
    threads: { type: 'string', default: '1' },
    models: {
      type: 'string',
      default:
        'replica/MiniLM-L6-H384-uncased-sst2,replica/distilbert-base-uncased-finetuned-sst-2-english,replica/tiny-bert-sst2',
    },
    dtypes: { type: 'string', default: 'fp32,q8,int8-row@fp32,int8-row@q8' },
    texts: { type: 'string', default: '1000' },
    'model-dir': { type: 'string', default: MODEL_DIR },
    embedder: { type: 'string', default: 'replica/all-MiniLM-L6-v2' },
  },
});
const WORDS =
  'the a food service was cold warm friendly slow great terrible waiter soup in Paris Berlin evening coffee dessert not very'.split(
    ' ',
  );

/** `n` words, deterministic: about n + 2 tokens. */
function text(n: number, seed: number): string {
  return Array.from({ length: n }, (_v, i) => WORDS[(seed * 7 + i * 13 + ((seed * i) % 5)) % WORDS.length]).join(' ');
}

const SHAPES = [
  { name: '32×16', rows: 32, words: 14 },
  { name: '8×128', rows: 8, words: 126 },
];

/** Each dtype as asked for: its name, and int8-row's source where one is named. */
function parseDtype(name: string): { dtype: string; int8RowFrom?: 'fp32' | 'q8' } {
  const [dtype, from] = name.split('@');
  return from === 'fp32' || from === 'q8' ? { dtype, int8RowFrom: from } : { dtype };
}

async function load(
  model: string,
  name: string,
  task: 'text-classification' | 'feature-extraction',
): Promise<Loaded | undefined> {
  const { dtype, int8RowFrom } = parseDtype(name);
  process.env.DTYPE = dtype;
  try {
    return { ...(await loadInProcess(model, values['model-dir'], session, { int8RowFrom, task })), name };
  } catch (err) {
    console.log(`${model} ${name}: not run (${(err as Error).message.split('\n')[0]})`);
    return undefined;
  }
}

const labels = async (m: InProcessModel, texts: string[]) => {
  const out: string[] = [];
  for (let i = 0; i < texts.length; i += 32)
    out.push(...((await m.pipe(texts.slice(i, i + 32))) as Array<{ label: string }>).map((a) => a.label));
  return out;
};

/** Mean-pooled, normalized embeddings, as the embeddings routes answer. */
const embeddings = async (m: InProcessModel, texts: string[]) => {
  const out: number[][] = [];
  for (let i = 0; i < texts.length; i += 32) {
    const t = (
      await (m.pipe as unknown as (x: string[], o: object) => Promise<{ tolist(): number[][] }>)(
        texts.slice(i, i + 32),
        { pooling: 'mean', normalize: true },
      )
    ).tolist();
    out.push(...t);
  }
  return out;
};
const cosine = (a: number[], b: number[]) => {
  let [ab, aa, bb] = [0, 0, 0];
  a.forEach((x, i) => ((ab += x * b[i]), (aa += x * x), (bb += b[i] * b[i])));
  return ab / Math.sqrt(aa * bb);
};

const session = { intraOpNumThreads: Number(values.threads), enableMemPattern: false };
const dtypes = values.dtypes.split(',');
const corpus = Array.from({ length: Number(values.texts) }, (_v, i) => text(4 + (i % 40), i));
for (const model of values.models.split(',')) {
  const loaded: Loaded[] = [];
  for (const name of dtypes) {
    const m = await load(model, name, 'text-classification');
    if (m) loaded.push(m);
  }
  const rates = new Map<string, number[]>();
  for (let round = 0; round < Number(values.rounds); round++) {
    for (const shape of SHAPES) {
      for (const m of loaded) {
        const r = await measureBatched(m, text(shape.words, 1), shape.rows, Number(values.seconds));
        const key = `${m.name} ${shape.name}`;
        rates.set(key, [...(rates.get(key) ?? []), r.seqPerSec]);
      }
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(`\n${model} (seq/s, median of ${values.rounds} interleaved rounds, ${values.threads} thread(s))`);
  for (const shape of SHAPES) {
    const row = loaded.map((m) => `${m.name} ${median(rates.get(`${m.name} ${shape.name}`)!).toFixed(1)}`);
    console.log(`  ${shape.name}: ${row.join(' | ')}`);
  }
  const fp32 = loaded.find((m) => m.dtype === 'fp32');
  if (fp32) {
    const reference = await labels(fp32, corpus);
    for (const m of loaded.filter((x) => x !== fp32)) {
      const got = await labels(m, corpus);
      const agree = got.filter((l, i) => l === reference[i]).length;
      console.log(`  labels agreeing with fp32, ${m.name}: ${agree}/${corpus.length}`);
    }
  }
  for (const m of loaded) await m.dispose();
}

if (values.embedder) {
  console.log(`\n${values.embedder}: embeddings' cosine to fp32 over ${corpus.length} texts (min / median)`);
  const fp32 = await load(values.embedder, 'fp32', 'feature-extraction');
  const reference = fp32 && (await embeddings(fp32, corpus));
  await fp32?.dispose();
  for (const name of reference ? dtypes.filter((d) => d !== 'fp32') : []) {
    const m = await load(values.embedder, name, 'feature-extraction');
    if (!m) continue;
    const got = await embeddings(m, corpus);
    await m.dispose();
    const cosines = got.map((e, i) => cosine(e, reference![i])).sort((a, b) => a - b);
    console.log(`  ${name}: ${cosines[0].toFixed(4)} / ${cosines[Math.floor(cosines.length / 2)].toFixed(4)}`);
  }
}
