import { inferBody, inferPath, quiesce, type BenchContext } from './context.ts';
import { measureBatched, measureSingles, type InProcessModel } from './inprocess.ts';
import { runLoad } from './load.ts';
import type { PairedComparison, PairedRound } from './types.ts';

/**
 * Targets (a) and (b) compare the server with the same model run in this process, and this
 * machine's own speed drifts: pipe(list of 24) of MiniLM, alone on it, swung between 1,130-1,260
 * and 700-780 seq/s in spells of 10 to 45 seconds (3-second windows over 90 s, one sitting). The
 * sweep and the in-process figures it is compared with are minutes apart, so on their own they
 * judge the machine's drift as much as the server. Here the two sides of a target are measured one
 * right after the other, in rounds whose order alternates (in-process first, then the server
 * first, so a steady drift favours neither), and the target is judged by the median of the
 * rounds' own comparisons.
 */
export async function measurePaired(
  ctx: BenchContext,
  inproc: InProcessModel,
  text: string,
  tokens: number,
  concurrency: number,
  batchSize: number,
): Promise<PairedComparison> {
  const { options } = ctx;
  const inProcess = async () =>
    concurrency === 1
      ? (await measureSingles(inproc, text, options.singleCalls)).p50
      : (await measureBatched(inproc, text, batchSize, options.pairSeconds)).seqPerSec;
  const server = async () => {
    const load = await runLoad({
      url: ctx.url(),
      path: inferPath(inproc.model),
      body: inferBody(text),
      connections: concurrency,
      warmupSeconds: options.warmupSeconds,
      durationSeconds: options.pairSeconds,
    });
    return concurrency === 1 ? load.latency.p50 : load.rps;
  };
  const rounds: PairedRound[] = [];
  for (let i = 0; i < options.pairRounds; i++) {
    // In-process runs only once the server has nothing left to compute: they share the cores.
    await quiesce(ctx, inproc.model);
    if (i % 2 === 0) {
      const before = await inProcess();
      rounds.push({ inProcess: before, server: await server() });
    } else {
      const first = await server();
      await quiesce(ctx, inproc.model);
      rounds.push({ inProcess: await inProcess(), server: first });
    }
  }
  return { tokens, concurrency, batchSize, rounds };
}
