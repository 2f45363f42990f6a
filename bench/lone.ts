/**
 * A lone request through this checkout's gateway against another built checkout's, both before one
 * worker and one Redis: blocks of sequential calls, alternating between the two gateways with the
 * order swapped every block, so that the machine's drift and the worker's state favour neither. Each
 * block pairs A's p50 with B's; the ratio of a pair moves far less than either figure does over a
 * run, so a change to the gateway's side of the path of a few percent shows where `bench:ab`'s
 * rounds, each of its own system, scatter by tens of percent. The worker runs this checkout.
 * Usage: npm run bench:lone -- --against <built checkout> [--models a,b] [--blocks 16] [--calls 300]
 */
import path from 'node:path';
import { parseArgs } from 'node:util';
import { BenchSystem } from './lib/system.ts';
import { timeSequentialCalls } from './lib/sequential-calls.ts';
import { craftText, loadTokenizer } from './lib/texts.ts';
import { median, round } from './lib/stats.ts';
import { MODEL_DIR } from '../test/helpers/processes.ts';

const { values } = parseArgs({
  options: {
    against: { type: 'string' },
    models: { type: 'string', default: 'replica/MiniLM-L6-H384-uncased-sst2' },
    blocks: { type: 'string', default: '16' },
    calls: { type: 'string', default: '300' },
  },
});
if (!values.against) throw new Error('--against <built checkout> is required');
const against = path.resolve(values.against);
const blocks = Number(values.blocks);
const calls = Number(values.calls);

for (const model of values.models.split(',')) {
  const text = craftText(await loadTokenizer(model, MODEL_DIR), 16);
  const system = new BenchSystem({ modelDir: MODEL_DIR, logLevel: 'error' });
  try {
    await system.startRedis();
    await system.startGateway({ DEFAULT_MODEL: model });
    await system.startWorker(model);
    const sides = { A: await system.addGateway({ DEFAULT_MODEL: model }, against), B: system.url };
    // Past V8's optimizing of the paths a lone request takes, in both gateways and the worker.
    for (const url of [sides.A, sides.B, sides.A, sides.B]) await timeSequentialCalls(`${url}/`, text, 1500);
    const p50 = { A: [] as number[], B: [] as number[] };
    for (let block = 0; block < blocks; block++) {
      for (const side of block % 2 ? (['A', 'B'] as const) : (['B', 'A'] as const))
        p50[side].push((await timeSequentialCalls(`${sides[side]}/`, text, calls, 5)).p50);
    }
    const ratios = p50.B.map((b, i) => b / p50.A[i]);
    const list = (xs: number[]) => xs.map((x) => round(x, 2)).join(' ');
    console.log(`${model}, 16 tokens, ${blocks} alternating blocks of ${calls} sequential calls`);
    console.log(`  c=1 p50 (ms)  A ${round(median(p50.A), 3)}  B ${round(median(p50.B), 3)}`);
    console.log(
      `  B/A per block: median ${round(median(ratios), 3)}, B ahead in ${ratios.filter((r) => r < 1).length} of ${blocks}`,
    );
    console.log(`  A: ${list(p50.A)}\n  B: ${list(p50.B)}`);
  } finally {
    await system.stop();
  }
}
