/**
 * One request of 2,048 inputs (what the `openai` client and LangChain send) against the same inputs
 * sent as 32 requests of 64 by concurrent clients, in interleaved rounds on one system at `npm
 * start`'s defaults (one worker beside the gateway and Redis): inputs per second of each, and the
 * p99 of an interactive client that sends one text at a time to the same model meanwhile.
 * Usage: npm run bench:large-list [-- --rounds 6 --model replica/all-MiniLM-L6-v2 --inputs 2048 --clients 32]
 */
import { parseArgs } from 'node:util';
import { BenchSystem } from './lib/system.ts';
import { median, round, summarize } from './lib/stats.ts';
import { MODEL_DIR } from '../test/helpers/processes.ts';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '6' },
    model: { type: 'string', default: 'replica/all-MiniLM-L6-v2' },
    inputs: { type: 'string', default: '2048' },
    clients: { type: 'string', default: '32' },
  },
});
const rounds = Number(values.rounds);
const model = values.model;
const inputs = Number(values.inputs);
const clients = Number(values.clients);

const system = new BenchSystem({ modelDir: MODEL_DIR, logLevel: 'error' });
/** How often the interactive client sends a text while the load runs (open loop: it does not wait for its answers). */
const INTERACTIVE_EVERY_MS = 250;

/** A client's documents: a sentence each (about 16 tokens, as the other benches' texts), every one distinct. */
const texts = Array.from(
  { length: inputs },
  (_, i) => `document ${i}: a sentence of an ordinary length about topic ${i % 101}`,
);

async function embed(input: string[] | string): Promise<void> {
  const res = await fetch(`${system.url}/v1/embeddings`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, input }),
  });
  await res.arrayBuffer();
  if (!res.ok) throw new Error(`${res.status} from /v1/embeddings`);
}

/**
 * Runs `send` while an interactive client sends one text every INTERACTIVE_EVERY_MS, from just
 * after the load is sent until it is answered: the seconds the load took, and the latency of each
 * of the client's requests, every one awaited (one still out when the load ends counts too).
 */
async function withInteractive(send: () => Promise<void>): Promise<{ seconds: number; latencies: number[] }> {
  const latencies: Array<Promise<number>> = [];
  const started = performance.now();
  let done = false;
  const load = send().finally(() => (done = true));
  await new Promise((r) => setTimeout(r, INTERACTIVE_EVERY_MS / 2));
  for (let i = 0; !done; i++) {
    const sentAt = performance.now();
    latencies.push(embed(`an interactive question number ${i}`).then(() => performance.now() - sentAt));
    await Promise.race([load, new Promise((r) => setTimeout(r, INTERACTIVE_EVERY_MS))]);
  }
  await load;
  const seconds = (performance.now() - started) / 1000;
  return { seconds, latencies: await Promise.all(latencies) };
}

const whole = () => embed(texts);
const inPieces = async () => {
  const size = Math.ceil(inputs / clients);
  await Promise.all(Array.from({ length: clients }, (_, c) => embed(texts.slice(c * size, (c + 1) * size))));
};

try {
  await system.startRedis();
  await system.startGateway();
  await system.startWorker(model);
  await whole();
  await inPieces();
  const rows: Array<{ whole: number; pieces: number; ratio: number; p99Whole: number; p99Pieces: number }> = [];
  for (let r = 0; r < rounds; r++) {
    // Interleaved, the order alternating, so that a drift of the machine's speed falls on both.
    let a: Awaited<ReturnType<typeof withInteractive>>;
    let b: typeof a;
    if (r % 2 === 0) {
      a = await withInteractive(whole);
      b = await withInteractive(inPieces);
    } else {
      b = await withInteractive(inPieces);
      a = await withInteractive(whole);
    }
    const row = {
      whole: inputs / a.seconds,
      pieces: inputs / b.seconds,
      ratio: b.seconds / a.seconds,
      p99Whole: summarize(a.latencies).p99,
      p99Pieces: summarize(b.latencies).p99,
    };
    rows.push(row);
    console.log(
      `round ${r + 1}: one request ${round(row.whole, 1)} inputs/s, ${clients} requests ${round(row.pieces, 1)} inputs/s, ratio ${round(row.ratio, 3)}; interactive p99 ${round(row.p99Whole, 1)} / ${round(row.p99Pieces, 1)} ms (${a.latencies.length} / ${b.latencies.length} requests)`,
    );
  }
  const m = (pick: (row: (typeof rows)[number]) => number) => round(median(rows.map(pick)), 3);
  console.log(
    `\nmedians of ${rounds} interleaved rounds, ${model}, ${inputs} inputs: one request / ${clients} concurrent requests, throughput ${m((x) => x.ratio)}; interactive p99 during one request ${m((x) => x.p99Whole)} ms, during ${clients} requests ${m((x) => x.p99Pieces)} ms (ratio ${m((x) => x.p99Whole / x.p99Pieces)})`,
  );
} finally {
  await system.stop();
}
