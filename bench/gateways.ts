/**
 * What a request costs the one Redis a cluster shares when several gateways split the load: the
 * same closed-loop concurrency against 1, 2, 4 … gateways (one worker), and per answered request
 * the Redis commands, the redis-server CPU and the requests per job. A gateway coalesces only its
 * own requests, so more gateways mean smaller jobs; this measures by how much.
 * Usage: npm run bench:gateways [-- --gateways 1,2,4 --concurrency 64 --seconds 10 --model <id>]
 */
import { parseArgs } from 'node:util';
import { BenchSystem } from './lib/system.ts';
import { runLoad } from './lib/load.ts';
import { costPerRequest, readRedisCpu, readRedisStats, resetRedisStats } from './lib/redis-cost.ts';
import { MODEL_DIR, readMetric } from '../test/helpers/processes.ts';

const { values } = parseArgs({
  options: {
    gateways: { type: 'string', default: '1,2,4' },
    concurrency: { type: 'string', default: '64' },
    seconds: { type: 'string', default: '10' },
    model: { type: 'string', default: 'replica/MiniLM-L6-H384-uncased-sst2' },
  },
});
const counts = values.gateways.split(',').map(Number);
const concurrency = Number(values.concurrency);
const seconds = Number(values.seconds);
const model = values.model;

const system = new BenchSystem({ modelDir: MODEL_DIR, logLevel: 'error' });
const body = JSON.stringify({ inputs: 'the acting was fine but the story went nowhere' });

/** Jobs the gateways enqueued so far (their tserve_jobs_enqueued_total). */
async function jobsEnqueued(urls: string[]): Promise<number> {
  const counts = await Promise.all(urls.map((url) => readMetric(url, 'tserve_jobs_enqueued_total', { model })));
  return counts.reduce((a, b) => a + b, 0);
}

/** The same load split evenly over the gateways, all at once. */
const load = (urls: string[], durationSeconds: number) =>
  Promise.all(
    urls.map((url, i) =>
      runLoad({
        url,
        path: `/models/${model}`,
        body,
        connections: Math.floor(concurrency / urls.length) + (i < concurrency % urls.length ? 1 : 0),
        warmupSeconds: 0,
        durationSeconds,
      }),
    ),
  );

try {
  await system.startRedis();
  await system.startGateway();
  await system.startWorker(model);
  const urls = [system.url];
  const rows: string[] = [];
  for (const n of counts) {
    while (urls.length < n) urls.push(await system.addGateway());
    const active = urls.slice(0, n);
    await load(active, 2);
    await resetRedisStats(system.redisUrl);
    const [cpuAtStart, jobsAtStart] = await Promise.all([readRedisCpu(system.redisUrl), jobsEnqueued(active)]);
    const results = await load(active, seconds);
    const [stats, jobsAtEnd] = await Promise.all([readRedisStats(system.redisUrl), jobsEnqueued(active)]);
    const answered = results.reduce((sum, r) => sum + Math.round(r.rps * r.seconds), 0);
    const cost = costPerRequest(stats, cpuAtStart, answered);
    const jobs = jobsAtEnd - jobsAtStart;
    const p50 = results.reduce((m, r) => Math.max(m, r.latency.p50), 0);
    rows.push(
      [
        String(n).padStart(8),
        String(Math.round(concurrency / n)).padStart(9),
        (answered / seconds).toFixed(0).padStart(7),
        p50.toFixed(1).padStart(9),
        cost.commandsPerRequest.toFixed(1).padStart(9),
        cost.processUsecPerRequest.toFixed(0).padStart(8),
        (jobs ? (answered / jobs).toFixed(1) : '-').padStart(12),
      ].join('  '),
    );
  }
  console.log(
    `${model}, ${concurrency} connections in all, split evenly over the gateways; one worker; ${seconds} s per row`,
  );
  console.log('gateways  conn each  req/s  worst p50  redis cmd  redis µs  requests/job   (per answered request)');
  for (const row of rows) console.log(row);
} finally {
  await system.stop();
}
