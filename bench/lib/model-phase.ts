import { withCpu } from './cpu.ts';
import { inferBody, inferPath, measureQuietly, quiesce, type BenchContext } from './context.ts';
import { loadInProcess, measureBatched, measureMixedCycle, measureSingles, type InProcessModel } from './inprocess.ts';
import { runLoad, type LoadResult } from './load.ts';
import { measureLeastServer } from './path-floor.ts';
import { measurePaired } from './paired.ts';
import { round, type Summary } from './stats.ts';
import { pairedMedian } from './targets.ts';
import { craftText, loadTokenizer } from './texts.ts';
import { processMemory, resetPeakMemory } from '../../test/helpers/processes.ts';
import { variedTexts } from '../../test/helpers/texts.ts';
import type { InputText, MixedRun, ModelResults, PairedComparison, ServerPoint } from './types.ts';

/**
 * Everything measured for one model, alternating strictly between the server and the in-process
 * model (never both at once, since they share the cores): in-process single calls, the server's
 * concurrency sweep, in-process batches of the sizes the server formed, BATCH_MAX_SIZE=1, targets
 * (a) and (b)'s two sides back to back, mixed lengths.
 */

export interface ModelPhaseResult {
  results: ModelResults;
  points: ServerPoint[];
  mixed?: MixedRun;
}

const short = (model: string) => model.split('/').pop()!;

function describe(load: LoadResult, model: string): string {
  const mine = (k: string) => !k.startsWith('worker:') || k === `worker:${short(model)}`;
  const procs = load.cpu
    ? Object.entries(load.cpu.procs)
        .filter(([k]) => mine(k))
        .map(([k, v]) => `${k.replace(/^worker:.*/, 'worker')} ${v}%`)
    : [];
  const cpu = load.cpu ? ` cpu[${procs.join(' ')} other ${load.cpu.other}%]` : '';
  const redis = load.redis
    ? ` redis[${round(load.redis.commandsPerRequest, 1)} cmd ${round(load.redis.processUsecPerRequest, 1)} µs cpu per req]`
    : '';
  const memory = load.workerMemory
    ? ` worker RSS ${load.workerMemory.startMiB} MiB, peak ${load.workerMemory.peakMiB}`
    : '';
  return `${round(load.rps, 1)} req/s p50 ${round(load.latency.p50)} ms p99 ${round(load.latency.p99)} ms batch ${round(load.server.batchMean, 1)} errors ${load.errors}${cpu}${redis}${memory}`;
}

export async function runModelPhase(ctx: BenchContext, model: string): Promise<ModelPhaseResult> {
  const { options, log } = ctx;
  const tokenizer = await loadTokenizer(model, options.modelDir);
  const texts: Record<string, InputText> = {};
  const lengths = [...new Set([...options.lengths, options.mixedLongTokens])];
  for (const tokens of lengths) {
    const text = craftText(tokenizer, tokens);
    texts[tokens] = { tokens, chars: text.length, text };
  }

  const results: ModelResults = { model, texts, singles: [], batched: [] };
  const points: ServerPoint[] = [];
  const inproc = await loadInProcess(model, options.modelDir);
  results.device = inproc.device;
  results.dtype = inproc.dtype;
  try {
    results.answerCheck = await checkAnswer(ctx, inproc, texts[Math.min(...options.lengths)].text);
    log(
      `${short(model)} on ${inproc.device}/${inproc.dtype}: server answer vs in-process: same label ${results.answerCheck.sameLabel}, scores within ${results.answerCheck.maxScoreDiff.toExponential(1)}`,
    );
    for (const tokens of options.lengths) {
      const { value, cpu } = await measureQuietly(
        ctx,
        model,
        () => withCpu(ctx.pids(), () => measureSingles(inproc, texts[tokens].text, options.singleCalls)),
        (r) => r.cpu.other,
      );
      results.singles.push({ tokens, latency: value, cpu });
      log(
        `${short(model)} in-process ${tokens} tok: pipe(text) p50 ${round(value.p50)} ms p99 ${round(value.p99)} ms (other cpu ${cpu.other}%)`,
      );
    }
    if (!options.skip.has('sweep') && options.concurrencies.includes(1) && ctx.system) {
      results.leastServer = await measureLeastServerOf(
        ctx,
        ctx.system.redisUrl,
        inproc,
        texts[Math.min(...options.lengths)].text,
      );
      log(
        `${short(model)} least server of the same parts running the model, c=1: p50 ${round(results.leastServer.p50)} ms p99 ${round(results.leastServer.p99)} ms`,
      );
    }

    if (!options.skip.has('sweep')) {
      for (const tokens of options.lengths) {
        for (const concurrency of options.concurrencies) {
          const load = await serverPoint(ctx, model, texts[tokens].text, concurrency);
          points.push({ model, tokens, concurrency, kind: 'sweep', load });
          log(`${short(model)} ${tokens} tok c=${concurrency}: ${describe(load, model)}`);
        }
      }
    }

    if (!options.skip.has('batch1') && ctx.system) {
      const concurrency = Math.max(...options.concurrencies);
      await ctx.system.restartWorker(model, { BATCH_MAX_SIZE: 1 });
      try {
        for (const tokens of options.lengths) {
          const load = await serverPoint(ctx, model, texts[tokens].text, concurrency);
          points.push({ model, tokens, concurrency, kind: 'batch1', load });
          log(`${short(model)} ${tokens} tok c=${concurrency} BATCH_MAX_SIZE=1: ${describe(load, model)}`);
        }
      } finally {
        await ctx.system.restartWorker(model);
      }
    }

    await measureBatchSizes(ctx, inproc, results, points);
    if (!options.skip.has('pairs')) results.paired = await measurePairs(ctx, inproc, results, points);

    const mixed = options.skip.has('mixed') ? undefined : await runMixed(ctx, inproc, model, texts, points);
    if (!options.skip.has('varied')) await runVaried(ctx, model, points);
    return { results, points, mixed };
  } finally {
    await inproc.dispose();
  }
}

/** The c=1 point's load against the least server running the model (lib/path-floor.ts), the server idle meanwhile. */
async function measureLeastServerOf(
  ctx: BenchContext,
  redisUrl: string,
  inproc: InProcessModel,
  text: string,
): Promise<Summary> {
  const { options } = ctx;
  const floorModel = { model: inproc.model, load: inproc.load, device: inproc.device, text };
  const time = async (url: string) =>
    (
      await runLoad({
        url,
        path: '/',
        body: inferBody(text),
        connections: 1,
        warmupSeconds: options.warmupSeconds,
        durationSeconds: options.durationSeconds,
      })
    ).latency;
  await quiesce(ctx, inproc.model);
  return measureLeastServer(redisUrl, time, floorModel);
}

/** One answer through the whole system against the same call in-process (q8 shifts with batch mates; fp16 within its precision). */
async function checkAnswer(
  ctx: BenchContext,
  inproc: InProcessModel,
  text: string,
): Promise<NonNullable<ModelResults['answerCheck']>> {
  const res = await fetch(`${ctx.url()}${inferPath(inproc.model)}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ inputs: text, parameters: { top_k: null } }),
  });
  const served = ((await res.json()) as Array<Array<{ label: string; score: number }>>)[0];
  const local = await (inproc.pipe as (t: string, o: unknown) => Promise<Array<{ label: string; score: number }>>)(
    text,
    { top_k: null },
  );
  const byLabel = new Map(local.map((l) => [l.label, l.score]));
  return {
    text,
    sameLabel: served[0].label === local[0].label,
    maxScoreDiff: Math.max(...served.map((s) => Math.abs(s.score - (byLabel.get(s.label) ?? NaN)))),
  };
}

/**
 * One closed-loop point, with the worker's peak memory over it: its high-water mark (VmHWM) is reset
 * as the point starts, so the peak is this workload's, above what the worker already held then.
 */
function serverPoint(
  ctx: BenchContext,
  model: string,
  text: string,
  concurrency: number,
  body?: () => string,
): Promise<LoadResult> {
  const worker = ctx.system?.workers.get(model)?.pid;
  const run = async () => {
    const start = resetPeakMemory(worker) ? processMemory(worker) : undefined;
    const load = await runLoad({
      url: ctx.url(),
      path: inferPath(model),
      body: body ?? inferBody(text),
      connections: concurrency,
      warmupSeconds: ctx.options.warmupSeconds,
      durationSeconds: ctx.options.durationSeconds,
      pids: ctx.pids(),
      redisUrl: ctx.system?.redisUrl,
    });
    const end = processMemory(worker);
    return start && end
      ? { ...load, workerMemory: { startMiB: round(start.rss, 1), peakMiB: round(end.peak, 1) } }
      : load;
  };
  return measureQuietly(ctx, model, run, (load) => load.cpu?.other);
}

/** The varied load: texts of 1 to 400 words, the same ones in the same order every run, at the mixed run's concurrency. */
async function runVaried(ctx: BenchContext, model: string, points: ServerPoint[]): Promise<void> {
  const texts = variedTexts(4096).map((text) => inferBody(text));
  let sent = 0;
  const load = await serverPoint(ctx, model, '', ctx.options.mixedConcurrency, () => texts[sent++ % texts.length]);
  points.push({ model, tokens: 402, concurrency: ctx.options.mixedConcurrency, kind: 'varied', load });
  ctx.log(`${short(model)} varied (1 to 400 words) c=${ctx.options.mixedConcurrency}: ${describe(load, model)}`);
}

/** In-process pipe(list) at every (rounded) mean batch size the server formed, per length. */
async function measureBatchSizes(
  ctx: BenchContext,
  inproc: InProcessModel,
  results: ModelResults,
  points: ServerPoint[],
): Promise<void> {
  for (const tokens of ctx.options.lengths) {
    const sizes = new Set(
      points
        .filter((p) => p.tokens === tokens && Number.isFinite(p.load.server.batchMean))
        .map((p) => Math.max(1, Math.round(p.load.server.batchMean))),
    );
    for (const batchSize of [...sizes].sort((a, b) => a - b)) {
      const measure = () =>
        withCpu(ctx.pids(), () =>
          measureBatched(inproc, results.texts[tokens].text, batchSize, ctx.options.batchedSeconds),
        );
      const { value, cpu } = await measureQuietly(ctx, results.model, measure, (r) => r.cpu.other);
      results.batched.push({ tokens, ...value, cpu });
      ctx.log(
        `${short(results.model)} in-process ${tokens} tok pipe(list of ${batchSize}): ${round(value.seqPerSec, 1)} seq/s, call p50 ${round(value.callP50Ms)} ms`,
      );
    }
  }
}

/** Targets (a) and (b)'s comparisons, each side measured right after the other (lib/paired.ts): c=1 at the shortest length, the top concurrency at each. */
async function measurePairs(
  ctx: BenchContext,
  inproc: InProcessModel,
  results: ModelResults,
  points: ServerPoint[],
): Promise<PairedComparison[]> {
  const { options } = ctx;
  const top = Math.max(...options.concurrencies);
  const shortest = Math.min(...options.lengths);
  const wanted = [
    ...(options.concurrencies.includes(1) ? [{ tokens: shortest, concurrency: 1 }] : []),
    ...(top > 1 ? options.lengths.map((tokens) => ({ tokens, concurrency: top })) : []),
  ];
  const compared: PairedComparison[] = [];
  for (const { tokens, concurrency } of wanted) {
    const point = points.find((p) => p.kind === 'sweep' && p.tokens === tokens && p.concurrency === concurrency);
    if (!point) continue;
    // The pipe(list) compared is as large as the batches the server formed at this point.
    const batchSize = Math.max(1, Math.round(point.load.server.batchMean));
    const pair = await measurePaired(ctx, inproc, results.texts[tokens].text, tokens, concurrency, batchSize);
    compared.push(pair);
    const rounds = pair.rounds.map((r) => `${round(r.server, 1)}/${round(r.inProcess, 1)}`).join(', ');
    ctx.log(
      concurrency === 1
        ? `${short(results.model)} ${tokens} tok c=1 back to back (server/in-process p50 ms): ${rounds}; median +${round(pairedMedian(pair))} ms`
        : `${short(results.model)} ${tokens} tok c=${concurrency} back to back (server req/s / in-process pipe(list of ${batchSize}) seq/s): ${rounds}; median ${round(pairedMedian(pair) * 100, 1)}%`,
    );
  }
  return compared;
}

async function runMixed(
  ctx: BenchContext,
  inproc: InProcessModel,
  model: string,
  texts: Record<string, InputText>,
  points: ServerPoint[],
): Promise<MixedRun> {
  const { options } = ctx;
  const shortTokens = Math.min(...options.lengths);
  const concurrency = options.mixedConcurrency;
  let allShort = points.find(
    (p) => p.kind === 'sweep' && p.tokens === shortTokens && p.concurrency === concurrency,
  )?.load;
  if (!allShort) {
    allShort = await serverPoint(ctx, model, texts[shortTokens].text, concurrency);
    points.push({ model, tokens: shortTokens, concurrency, kind: 'sweep', load: allShort });
  }
  const shortBody = inferBody(texts[shortTokens].text);
  const longBody = inferBody(texts[options.mixedLongTokens].text);
  let sent = 0;
  // One request in `every` is long, counted over all connections, so the ratio holds exactly.
  const mixed = await serverPoint(ctx, model, '', concurrency, () =>
    sent++ % options.mixedEvery === 0 ? longBody : shortBody,
  );
  ctx.log(
    `${short(model)} mixed (1 in ${options.mixedEvery} of ${options.mixedLongTokens} tok) c=${concurrency}: ${describe(mixed, model)}; all-short ${round(allShort.rps, 1)} req/s`,
  );

  const batchSize = Math.max(1, Math.round(allShort.server.batchMean || 1));
  await quiesce(ctx, model);
  const ideal = await measureMixedCycle(
    inproc,
    texts[shortTokens].text,
    texts[options.mixedLongTokens].text,
    options.mixedEvery,
    batchSize,
    options.batchedSeconds * 2,
  );
  ctx.log(
    `${short(model)} in-process mixed cycle: ideal throughput ratio ${round(ideal.idealRatio, 3)} (batches of ${batchSize})`,
  );
  return {
    model,
    concurrency,
    every: options.mixedEvery,
    shortTokens,
    longTokens: options.mixedLongTokens,
    mixed,
    allShortRps: allShort.rps,
    allShortBatchMean: allShort.server.batchMean,
    inProcessIdeal: { ...ideal, batchSize },
  };
}
