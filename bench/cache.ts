/**
 * The response cache (RESPONSE_CACHE_TTL_S) under a load whose inputs repeat: half the requests
 * ask again for one of a fixed pool of texts, the other half for a text never seen before. Two
 * gateways share one Redis and one worker, the cache off in one and on in the other, and each round
 * measures both one after the other, the order swapped every round, so that the machine's drift
 * favours neither. Per concurrency and side: the medians over the rounds of requests/s and p50,
 * and the share of inputs the cache answered.
 * Usage: npm run bench:cache [-- --concurrency 1,64 --rounds 4 --seconds 5 --repeat 0.5 --model <id>]
 */
import { parseArgs } from 'node:util';
import { BenchSystem } from './lib/system.ts';
import { runLoad } from './lib/load.ts';
import { median, round } from './lib/stats.ts';
import { MODEL_DIR, readMetric } from '../test/helpers/processes.ts';
import { PROSE } from '../test/helpers/texts.ts';

const { values } = parseArgs({
  options: {
    concurrency: { type: 'string', default: '1,64' },
    rounds: { type: 'string', default: '4' },
    seconds: { type: 'string', default: '5' },
    repeat: { type: 'string', default: '0.5' },
    pool: { type: 'string', default: '100' },
    model: { type: 'string', default: 'replica/MiniLM-L6-H384-uncased-sst2' },
  },
});
const concurrencies = values.concurrency.split(',').map(Number);
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const repeatShare = Number(values.repeat);
const model = values.model;

/** About 16 tokens of the prose, from its `start`th word: every text of the load is this long. */
const textAt = (start: number) => Array.from({ length: 12 }, (_, i) => PROSE[(start + i) % PROSE.length]).join(' ');
const pool = Array.from({ length: Number(values.pool) }, (_, i) => textAt(i * 7));
let fresh = 0;
/** Seeded: every run draws the same sequence of repeats and fresh texts. */
let seed = 1;
const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
const body = () =>
  JSON.stringify({
    inputs:
      random() < repeatShare ? pool[Math.floor(random() * pool.length)] : `${textAt(fresh)} ${(fresh++).toString(36)}`,
  });

const system = new BenchSystem({ modelDir: MODEL_DIR, logLevel: 'error' });
const sides = ['off', 'on'] as const;
type Side = (typeof sides)[number];

interface Point {
  rps: number;
  p50: number;
  hitShare?: number;
}

const cacheCounts = async (url: string) => ({
  hits: await readMetric(url, 'tserve_response_cache_hits_total', { model }),
  misses: await readMetric(url, 'tserve_response_cache_misses_total', { model }),
});

try {
  await system.startRedis();
  await system.startGateway();
  await system.startWorker(model);
  const urls: Record<Side, string> = { off: system.url, on: await system.addGateway({ RESPONSE_CACHE_TTL_S: '3600' }) };
  const points = new Map<string, Point[]>();
  for (let r = 0; r < rounds; r++) {
    for (const connections of concurrencies) {
      for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
        const before = await cacheCounts(urls[side]);
        const load = await runLoad({
          url: urls[side],
          path: `/models/${model}`,
          body,
          connections,
          warmupSeconds: 1,
          durationSeconds: seconds,
        });
        const after = await cacheCounts(urls[side]);
        const looked = after.hits + after.misses - before.hits - before.misses;
        const key = `${connections} ${side}`;
        points.set(key, [
          ...(points.get(key) ?? []),
          {
            rps: load.rps,
            p50: load.latency.p50,
            ...(looked ? { hitShare: (after.hits - before.hits) / looked } : {}),
          },
        ]);
        process.stderr.write(
          `round ${r + 1} c=${connections} cache ${side}: ${round(load.rps, 1)} req/s, p50 ${round(load.latency.p50)} ms\n`,
        );
      }
    }
  }
  console.log(
    `${model}, ${Math.round(repeatShare * 100)}% of requests repeat one of ${pool.length} texts; medians of ${rounds} rounds of ${seconds} s`,
  );
  console.log('conc  cache    req/s      p50 ms   hits   (each round)');
  for (const connections of concurrencies) {
    for (const side of sides) {
      const got = points.get(`${connections} ${side}`) ?? [];
      const shares = got.flatMap((p) => (p.hitShare === undefined ? [] : [p.hitShare]));
      console.log(
        [
          String(connections).padStart(4),
          side.padStart(5),
          round(median(got.map((p) => p.rps)), 1)
            .toFixed(1)
            .padStart(8),
          round(median(got.map((p) => p.p50)), 2)
            .toFixed(2)
            .padStart(11),
          (shares.length ? `${Math.round(median(shares) * 100)}%` : '-').padStart(6),
          `  (${got.map((p) => `${round(p.rps, 1)} req/s ${round(p.p50, 2)} ms`).join('; ')})`,
        ].join(' '),
      );
    }
  }
} finally {
  await system.stop();
}
