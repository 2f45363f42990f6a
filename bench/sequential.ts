/**
 * The plainest overhead figure: N sequential `POST /` calls with a raw text body (the classic
 * pipeline-web-server contract) against the same model called in-process, in one run, and against
 * the path's floors on this machine (lib/path-floor.ts): the same hops with no work behind them, and
 * the least server of the same parts running the model.
 * Usage: npm run bench:sequential [-- --calls 200 --model <id> --text "..."]
 */
import { parseArgs } from 'node:util';
import { BenchSystem } from './lib/system.ts';
import { loadInProcess, measureSingles } from './lib/inprocess.ts';
import type { Summary } from './lib/stats.ts';
import { timeSequentialCalls } from './lib/sequential-calls.ts';
import { measureLeastServer, measurePathFloor } from './lib/path-floor.ts';
import type { PathFloor } from './lib/types.ts';
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
const local = await loadInProcess(model, MODEL_DIR);
const time = (url: string) => timeSequentialCalls(url, text, calls);
let server: Summary;
let floor: PathFloor;
let least: Summary;
try {
  await system.startRedis();
  // Before the server starts: the floors' processes have the machine to themselves.
  floor = await measurePathFloor(system.redisUrl, time);
  least = await measureLeastServer(system.redisUrl, time, { model, load: local.load, device: local.device, text });
  await system.startGateway({ DEFAULT_MODEL: model });
  await system.startWorker(model);
  server = await timeSequentialCalls(`${system.url}/`, text, calls);
} finally {
  await system.stop();
}
// Measured after the server stopped: both use every core.
const inProcess = await measureSingles(local, text, calls);
await local.dispose();

const f = (v: number) => v.toFixed(2).padStart(8);
console.log(`${calls} sequential calls, ${model}, "${text}"`);
console.log(`                          p50      p90      p99   (ms)`);
console.log(`POST / (gateway)     ${f(server.p50)} ${f(server.p90)} ${f(server.p99)}`);
console.log(`pipe(text) in-process${f(inProcess.p50)} ${f(inProcess.p90)} ${f(inProcess.p99)}`);
console.log(`path floor, no work:`);
console.log(`  HTTP alone         ${f(floor.http.p50)} ${f(floor.http.p90)} ${f(floor.http.p99)}`);
console.log(`  + Redis and thread ${f(floor.relayed.p50)} ${f(floor.relayed.p90)} ${f(floor.relayed.p99)}`);
console.log(`least server, the same parts running the model:`);
console.log(`                     ${f(least.p50)} ${f(least.p90)} ${f(least.p99)}`);
const overhead = server.p50 - inProcess.p50;
console.log(`overhead p50: +${overhead.toFixed(2)} ms (${(server.p50 / inProcess.p50).toFixed(2)}x):`);
console.log(
  `  the path's hops at the model's pace +${(least.p50 - inProcess.p50).toFixed(2)} ms, the server's own work +${(server.p50 - least.p50).toFixed(2)} ms`,
);
