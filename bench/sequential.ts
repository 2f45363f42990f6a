/**
 * The plainest overhead figure: N sequential `POST /` calls with a raw text body (the classic
 * pipeline-web-server contract) against the same model called in-process, in one run.
 * Usage: npm run bench:sequential [-- --calls 200 --model <id> --text "..."]
 */
import { parseArgs } from 'node:util';
import { BenchSystem } from './lib/system.ts';
import { loadInProcess, measureSingles } from './lib/inprocess.ts';
import { summarize, type Summary } from './lib/stats.ts';
import { MODEL_DIR } from '../test/helpers/processes.ts';

const { values } = parseArgs({
  options: {
    calls: { type: 'string', default: '200' },
    model: { type: 'string', default: 'replica/MiniLM-L6-H384-uncased-sst2' },
    text: { type: 'string', default: 'This restaurant is awesome' },
  },
});
const calls = Number(values.calls);
const { model, text } = values as { model: string; text: string };

const system = new BenchSystem({ modelDir: MODEL_DIR, logLevel: 'error' });
let server: Summary;
try {
  await system.startRedis();
  await system.startGateway({ DEFAULT_MODEL: model });
  await system.startWorker(model);
  const post = async () => {
    const res = await fetch(`${system.url}/`, { method: 'POST', body: text });
    if (!res.ok) throw new Error(`POST / answered ${res.status}: ${await res.text()}`);
    await res.arrayBuffer();
  };
  for (let i = 0; i < 30; i++) await post();
  const times: number[] = [];
  for (let i = 0; i < calls; i++) {
    const started = performance.now();
    await post();
    times.push(performance.now() - started);
  }
  server = summarize(times);
} finally {
  await system.stop();
}
// Measured after the server stopped: both use every core.
const local = await loadInProcess(model, MODEL_DIR);
const inProcess = await measureSingles(local, text, calls);
await local.dispose();

const f = (v: number) => v.toFixed(2).padStart(8);
console.log(`${calls} sequential calls, ${model}, "${text}"`);
console.log(`                          p50      p90      p99   (ms)`);
console.log(`POST / (gateway)     ${f(server.p50)} ${f(server.p90)} ${f(server.p99)}`);
console.log(`pipe(text) in-process${f(inProcess.p50)} ${f(inProcess.p90)} ${f(inProcess.p99)}`);
console.log(`overhead p50: +${(server.p50 - inProcess.p50).toFixed(2)} ms (${(server.p50 / inProcess.p50).toFixed(2)}x)`);
