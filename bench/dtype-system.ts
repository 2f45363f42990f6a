/**
 * The whole system's throughput per dtype: one Redis and one gateway, and a worker of the model
 * restarted with each DTYPE in turn, in interleaved rounds (each round runs every dtype once, the
 * order reversed every other round, so the shared machine's drift falls on all alike). Closed loop
 * at c=64 (`--connections`) with texts of 16 and 128 tokens. --model-dir: a folder where each model
 * has onnx/model.onnx (scripts/fp32-from-q8.py writes one from a replica's q8 file).
 * Usage: npm run bench:dtype-system [-- --rounds 3 --seconds 4 --models a,b --dtypes fp32,int8-row,q8 --model-dir dir]
 */
import { parseArgs } from 'node:util';
import { BenchSystem } from './lib/system.ts';
import { DEFAULT_MODELS } from './lib/options.ts';
import { runLoad } from './lib/load.ts';
import { craftText, loadTokenizer } from './lib/texts.ts';
import { median, round } from './lib/stats.ts';
import { MODEL_DIR } from '../test/helpers/processes.ts';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '4' },
    connections: { type: 'string', default: '64' },
    models: { type: 'string', default: DEFAULT_MODELS.join(',') },
    dtypes: { type: 'string', default: 'fp32,int8-row,q8' },
    tokens: { type: 'string', default: '16,128' },
    'model-dir': { type: 'string', default: MODEL_DIR },
  },
});
const rounds = Number(values.rounds);
const dtypes = values.dtypes.split(',');
const lengths = values.tokens.split(',').map(Number);
const system = new BenchSystem({ modelDir: values['model-dir'], logLevel: 'error' });

try {
  await system.startRedis();
  await system.startGateway();
  for (const model of values.models.split(',')) {
    const tokenizer = await loadTokenizer(model, values['model-dir']);
    const rps = new Map<string, number[]>();
    for (let r = 0; r < rounds; r++) {
      for (const dtype of r % 2 ? [...dtypes].reverse() : dtypes) {
        await system.startWorker(model, { DTYPE: dtype });
        for (const tokens of lengths) {
          const spec = {
            url: system.url,
            path: `/models/${model}`,
            body: JSON.stringify({ inputs: craftText(tokenizer, tokens) }),
            connections: Number(values.connections),
          };
          const load = await runLoad({ ...spec, warmupSeconds: 1, durationSeconds: Number(values.seconds) });
          if (load.errors) throw new Error(`${model} ${dtype} ${tokens} tokens: ${load.errors} errors`);
          const key = `${tokens}\n${dtype}`;
          rps.set(key, [...(rps.get(key) ?? []), load.rps]);
        }
        await system.workers.get(model)?.stop('SIGTERM', 3000);
        await system.waitForWorkers(model, 0);
      }
      process.stderr.write(`${model}: round ${r + 1} of ${rounds} done\n`);
    }
    console.log(
      `${model}, c=${values.connections}, ${rounds} interleaved rounds of ${values.seconds} s; req/s, medians (each round)`,
    );
    for (const tokens of lengths) {
      const med = (dtype: string) => median(rps.get(`${tokens}\n${dtype}`) ?? []);
      const cells = dtypes.map(
        (d) => `${d} ${round(med(d), 0)} (${(rps.get(`${tokens}\n${d}`) ?? []).map((v) => round(v, 0)).join(' ')})`,
      );
      const ratios = dtypes.slice(1).map((d) => `${d}/${dtypes[0]} ${round(med(d) / med(dtypes[0]), 2)}`);
      console.log(`  ${tokens} tokens: ${cells.join('  ')}  ${ratios.join('  ')}`);
    }
  }
} finally {
  await system.stop();
}
