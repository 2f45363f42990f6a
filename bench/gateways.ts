/**
 * What a request costs the one Redis a cluster shares when several gateways split the load: the
 * same closed-loop concurrency against 1, 2, 4 … gateways (one worker), and per answered request
 * the Redis commands, the redis-server CPU, the share sent in direct entries and the requests per
 * job of the rest. A gateway coalesces only its own requests, so more gateways mean smaller jobs and
 * entries; this measures by how much.
 * Usage: npm run bench:gateways [-- --gateways 1,2,4 --concurrency 64 --seconds 10 --model <id>]
 */
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { queueNameFor } from '@tserve/queue';
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

/** Requests the gateways sent in direct entries so far (their tserve_direct_requests_total). */
async function directSent(urls: string[]): Promise<number> {
  const counts = await Promise.all(urls.map((url) => readMetric(url, 'tserve_direct_requests_total', { model })));
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
  const admin = new Redis(system.redisUrl);
  // BullMQ counts every job it adds here, custom ids included.
  const jobCounter = `${system.prefix}:${queueNameFor(model)}:id`;
  const urls = [system.url];
  const rows: string[] = [];
  for (const n of counts) {
    while (urls.length < n) urls.push(await system.addGateway());
    const active = urls.slice(0, n);
    await load(active, 2);
    await resetRedisStats(system.redisUrl);
    const [cpuAtStart, jobsAtStart, directAtStart] = await Promise.all([readRedisCpu(system.redisUrl), admin.get(jobCounter), directSent(active)]);
    const results = await load(active, seconds);
    const [stats, jobsAtEnd, directAtEnd] = await Promise.all([readRedisStats(system.redisUrl), admin.get(jobCounter), directSent(active)]);
    const answered = results.reduce((sum, r) => sum + Math.round(r.rps * r.seconds), 0);
    const cost = costPerRequest(stats, cpuAtStart, answered);
    const jobs = Number(jobsAtEnd) - Number(jobsAtStart);
    const direct = Math.min(answered, directAtEnd - directAtStart);
    const p50 = results.reduce((m, r) => Math.max(m, r.latency.p50), 0);
    rows.push(
      [
        String(n).padStart(8),
        String(Math.round(concurrency / n)).padStart(9),
        (answered / seconds).toFixed(0).padStart(7),
        p50.toFixed(1).padStart(9),
        cost.commandsPerRequest.toFixed(1).padStart(9),
        cost.processUsecPerRequest.toFixed(0).padStart(8),
        `${Math.round((100 * direct) / Math.max(1, answered))}%`.padStart(6),
        (jobs ? ((answered - direct) / jobs).toFixed(1) : '-').padStart(12),
      ].join('  '),
    );
  }
  admin.disconnect();
  console.log(`${model}, ${concurrency} connections in all, split evenly over the gateways; one worker; ${seconds} s per row`);
  console.log('gateways  conn each  req/s  worst p50  redis cmd  redis µs  direct  requests/job   (per answered request; requests/job of those sent as jobs)');
  for (const row of rows) console.log(row);
} finally {
  await system.stop();
}
