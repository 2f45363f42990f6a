import fs from 'node:fs';
import path from 'node:path';
import { env, pipeline } from '@huggingface/transformers';
import { chooseDtype, resolveDevice } from '../../apps/worker/src/model/device.ts';
import { summarize, type Summary } from './stats.ts';
import { int8RowModel } from './int8-row.ts';

/**
 * The floor the server is measured against: the same model, dtype and runtime, called directly
 * in this process with no HTTP, queue or process hop. Callers must keep the server idle meanwhile:
 * both use every core, so overlapping them would slow both and flatter neither.
 */

type Pipe = (input: string | string[]) => Promise<unknown>;

export interface InProcessModel {
  model: string;
  pipe: Pipe;
  device: string;
  dtype: string;
  /** Where transformers.js loads it from, as pipeline options: a thread of a bench loads the same file with them (int8-row's is written apart). */
  load: { modelDir: string; dtype: string; fileName?: string };
  dispose(): Promise<void>;
}

/**
 * `sessionOptions`: ONNX Runtime's, where a caller must run the model as the workers do rather than as transformers.js does by default.
 * `options.int8RowFrom`: the file int8-row is written from, where a bench compares the two; `options.task`: the pipeline's.
 */
export async function loadInProcess(
  model: string,
  modelDir: string,
  sessionOptions?: Record<string, unknown>,
  options: { int8RowFrom?: 'fp32' | 'q8'; task?: 'text-classification' | 'feature-extraction' } = {},
): Promise<InProcessModel> {
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  env.localModelPath = modelDir;
  // The device and dtype the workers run (DEVICE/DTYPE from the environment, chosen as they choose).
  const device = resolveDevice((process.env.DEVICE ?? 'cpu') as Parameters<typeof resolveDevice>[0]);
  const onnx = path.join(modelDir, model, 'onnx');
  const { dtype } = chooseDtype(
    (process.env.DTYPE ?? 'auto') as Parameters<typeof chooseDtype>[0],
    device,
    fs.existsSync(onnx) ? fs.readdirSync(onnx) : undefined,
    process.env.DTYPE_FORCE === 'true',
  );
  // int8-row is a file written from the model's own (its fp32 weights, else its q8 export), loaded as fp32 files are.
  const rows = dtype === 'int8-row' ? await int8RowModel(modelDir, model, options.int8RowFrom) : undefined;
  if (rows) env.localModelPath = rows.modelDir;
  const pipe = (await pipeline(options.task ?? 'text-classification', model, {
    dtype: dtype === 'int8-row' ? 'fp32' : dtype,
    ...(rows ? { model_file_name: rows.fileName } : {}),
    device,
    ...(sessionOptions ? { session_options: sessionOptions } : {}),
  })) as unknown as Pipe & { dispose(): Promise<void> };
  const load = {
    modelDir: rows?.modelDir ?? modelDir,
    dtype: dtype === 'int8-row' ? 'fp32' : dtype,
    ...(rows ? { fileName: rows.fileName } : {}),
  };
  return { model, pipe, device, dtype, load, dispose: () => pipe.dispose() };
}

/** Latency of pipe(text), one call at a time, after a warm-up the statistics leave out. */
export async function measureSingles(m: InProcessModel, text: string, calls: number): Promise<Summary> {
  for (let i = 0; i < Math.max(10, calls / 10); i++) await m.pipe(text);
  const times: number[] = [];
  for (let i = 0; i < calls; i++) {
    const started = performance.now();
    await m.pipe(text);
    times.push(performance.now() - started);
  }
  return summarize(times);
}

export interface BatchedResult {
  batchSize: number;
  calls: number;
  /** Sequences per second over back-to-back pipe(list) calls. */
  seqPerSec: number;
  /** Median time of one pipe(list) call: the best latency a request in such a batch could see. */
  callP50Ms: number;
}

export async function measureBatched(
  m: InProcessModel,
  text: string,
  batchSize: number,
  seconds: number,
): Promise<BatchedResult> {
  const list = Array.from({ length: batchSize }, () => text);
  await m.pipe(list);
  await m.pipe(list);
  const times: number[] = [];
  const started = performance.now();
  // At least a few calls even when one call outlasts the time box.
  while (performance.now() - started < seconds * 1000 || times.length < 3) {
    const t = performance.now();
    await m.pipe(list);
    times.push(performance.now() - t);
  }
  const elapsed = performance.now() - started;
  return {
    batchSize,
    calls: times.length,
    seqPerSec: (times.length * batchSize * 1000) / elapsed,
    callP50Ms: summarize(times).p50,
  };
}

/**
 * Time for in-process code to run one cycle of the mixed workload as well as it can: the short
 * inputs in batches of `batchSize`, the long one alone (as a length-aware planner would). The
 * ratio of the all-short cycle to this is the best throughput ratio the server could show.
 */
export async function measureMixedCycle(
  m: InProcessModel,
  short: string,
  long: string,
  every: number,
  batchSize: number,
  seconds: number,
): Promise<{ shortOnlyMs: number; mixedMs: number; idealRatio: number }> {
  const cycle = async (withLong: boolean) => {
    const started = performance.now();
    let left = withLong ? every - 1 : every;
    while (left > 0) {
      const n = Math.min(batchSize, left);
      await m.pipe(Array.from({ length: n }, () => short));
      left -= n;
    }
    if (withLong) await m.pipe(long);
    return performance.now() - started;
  };
  await cycle(true);
  const timeBox = async (withLong: boolean) => {
    const times: number[] = [];
    const until = performance.now() + (seconds * 1000) / 2;
    while (performance.now() < until || times.length < 3) times.push(await cycle(withLong));
    return summarize(times).p50;
  };
  const shortOnlyMs = await timeBox(false);
  const mixedMs = await timeBox(true);
  return { shortOnlyMs, mixedMs, idealRatio: shortOnlyMs / mixedMs };
}
