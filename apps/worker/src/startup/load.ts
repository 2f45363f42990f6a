import os from 'node:os';
import path from 'node:path';
import type { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { WorkerConfig } from '@tserve/config';
import type { WorkerInfo } from '@tserve/contract';
import { createRedis, reportLoadFailure, whenReady, type RedisSettings } from '@tserve/queue';
import { chooseRuntime, describeModel, ModelLoadError, type LoadedModel } from '../model/model.js';
import { residentMemory, type BudgetInput, type MemoryLimits } from '../model/memory.js';
import { isGpu } from '../model/device.js';
import { sha256File } from '../model/download.js';
import { startModelThread } from '../model/model-thread.js';
import type { SessionNames } from '../model/model-thread-protocol.js';
import { Engine, type Encoded } from '../model/engine.js';
import { InferenceStatistics } from '../pipeline/stats.js';
import type { ModelBatchRunnerParts } from '../pipeline/runner.js';
import type { Heartbeat } from '../transport/heartbeat.js';
import { boundedCalls, memoryBudget } from './budget.js';
import { locateModel, weightsToLoad, type ModelSource } from './weights.js';

export interface LoadParts {
  config: WorkerConfig;
  /** WORKER_MEMORY_MB was not set: a budget the operator did not ask for gives way where it cannot apply. */
  memoryDefaulted: boolean;
  /** What the heartbeat announces: the load fills in the device, dtype, weights and limits. */
  info: WorkerInfo;
  heartbeat: Heartbeat;
  logger: Logger;
  /** When the start began (performance.now()): the load time reported to the gateways counts from it. */
  started: number;
}

/** The model, loaded and warmed up, and what its calls are bounded by. */
export interface LoadedWorker {
  loaded: LoadedModel;
  source: ModelSource;
  thread: Worker;
  engine: Engine;
  stats: InferenceStatistics;
  batchLimits: ModelBatchRunnerParts['limits'];
  /** The load's time, a download's excluded. */
  loadMs: number;
}

/**
 * Loads the model once: its files (downloaded from the hub as needed), its runtime and weights, the
 * memory budget, the model thread, and a warm-up call. A load that fails leaves its reason in Redis
 * for the gateways, stops the heartbeat, and throws.
 */
export async function loadModel({
  config,
  memoryDefaulted,
  info,
  heartbeat,
  logger,
  started,
}: LoadParts): Promise<LoadedWorker> {
  const reportFailure = async (err: unknown) => {
    await heartbeat.stop();
    if (err instanceof ModelLoadError) await leaveFailureReport(config, config.QUEUE_PREFIX, config.MODEL, err.message);
    throw err;
  };
  setNiceness(config.WORKER_NICE, logger);
  const { source, loaded, runtime, budget, prepared } = await chooseWhatToLoad(
    { config, memoryDefaulted, info, logger },
    reportFailure,
  );
  // The model thread loads exactly what was chosen here.
  const resolved = { ...config, DEVICE: runtime.device, DTYPE: prepared.dtype };
  Object.assign(info, {
    device: runtime.device,
    dtype: prepared.dtype,
    ...(prepared.fallback ? { dtypeFallback: prepared.fallback } : {}),
  } satisfies Partial<WorkerInfo>);
  const weights = prepared.describe;
  // Which weights answer, named by their hash: computed once, while the model thread loads them.
  const [{ thread, names }, weightsSha256] = await Promise.all([
    startModelThread(resolved, loaded.task, prepared.dir, prepared.file, (reason) => {
      // Its jobs stay locked until the lock expires; then another worker's stalled check runs them.
      logger.fatal({ reason }, 'model thread died; exiting');
      process.exit(1);
    }),
    prepared.sha256 ?? source.sha256.get(weights) ?? sha256File(path.join(source.dir, weights)),
  ]).catch(reportFailure);
  Object.assign(info, { weightsSha256, weightsFile: weights } satisfies Partial<WorkerInfo>);
  await Promise.resolve()
    .then(() => checkSentenceHead(config.MODEL, loaded, names))
    .catch(reportFailure);
  const engine = new Engine(loaded, thread);
  const stats = new InferenceStatistics();
  heartbeat.reportUsage(() => ({
    stats: stats.snapshot(),
    modelBusyMs: Math.round(engine.busyMs * 1000) / 1000,
    largestCallTokens: engine.largestCallTokens,
    ...residentMemory(),
  }));
  // The first call of a session allocates its buffers; pay that before taking any job.
  const warmText = loaded.tokenizer.mask_token ? `warm ${loaded.tokenizer.mask_token} up` : 'warm up';
  await engine.forward([engine.encode(warmText, true)]).catch(reportFailure);
  const limits = budget && (await measuredLimits(config.MODEL, budget).catch(reportFailure));
  if (budget && limits) announceLimits(config, budget, limits, info, logger);
  const batchLimits = limits ?? { maxSize: config.BATCH_MAX_SIZE, maxPaddedTokens: config.BATCH_MAX_TOKENS };
  if (isGpu(runtime.device)) {
    // A GPU compiles its kernels for each new shape: the largest batch is paid here, not by the first users.
    await engine.forward(largestBatch(config, loaded, engine, warmText)).catch(reportFailure);
  }
  // A download's time is not a load's: gateways estimate the rest of a download from its rate.
  const loadMs = performance.now() - started - source.downloadMs;
  logger.info(
    {
      task: loaded.task,
      dtype: prepared.dtype,
      device: runtime.device,
      batchMaxSize: config.BATCH_MAX_SIZE,
      loadMs: Math.round(loadMs),
      ...(source.downloadMs ? { downloadMs: Math.round(source.downloadMs) } : {}),
      ...(source.revision ? { revision: source.revision } : {}),
      weights,
      sha256: weightsSha256,
      ...(prepared.fallback ? { fallback: prepared.fallback } : {}),
      ...embeddingLog(loaded),
    },
    'model loaded',
  );

  return { loaded, source, thread, engine, stats, batchLimits, loadMs };
}

/**
 * What the load will hold, each step's failure reported: the model's files, its config and
 * tokenizer, its runtime (device and dtype), the memory budget, and the weights file.
 */
async function chooseWhatToLoad(
  { config, memoryDefaulted, info, logger }: Pick<LoadParts, 'config' | 'memoryDefaulted' | 'info' | 'logger'>,
  reportFailure: (err: unknown) => Promise<never>,
) {
  // A hub model is downloaded into the cache first (its progress rides on the heartbeat), then
  // loaded from there like a MODEL_DIR model.
  const source = await locateModel(config, info, logger).catch(reportFailure);
  // Config and tokenizer first: a model that is not there is reported by its path.
  const loaded = await describeModel(config, source.dir).catch(reportFailure);
  const runtime = await Promise.resolve()
    .then(() => chooseRuntime(config, source.dir))
    .catch(reportFailure);
  if (runtime.reason) logger.info(runtime.reason);
  for (const warning of runtime.warnings) logger.warn(warning);
  const budget = await Promise.resolve()
    .then(() => memoryBudget(config, memoryDefaulted, loaded, runtime, logger))
    .catch(reportFailure);
  const prepared = await weightsToLoad(config, runtime, source, logger).catch(reportFailure);
  return { source, loaded, runtime, budget, prepared };
}

/**
 * WORKER_NICE, set before the model thread exists: Linux threads inherit their creator's niceness,
 * so the model thread and ONNX Runtime's pool get it, while a gateway beside them keeps its normal
 * priority.
 */
function setNiceness(nice: number, logger: Logger): void {
  if (nice === 0) return;
  try {
    os.setPriority(nice);
  } catch (err) {
    logger.warn({ err: String(err), nice }, "could not change the worker's priority; running at the default");
  }
}

/**
 * The limits the memory budget sets on model calls. What the worker holds at rest is measured now,
 * with the session's weights and its first call's buffers in, and taken where it is more than the
 * estimate.
 */
async function measuredLimits(model: string, budget: BudgetInput): Promise<Required<MemoryLimits>> {
  return boundedCalls(model, {
    ...budget,
    restingBytes: Math.max(budget.restingBytes, residentMemory().rssBytes),
  });
}

/** Logs the limits the memory budget sets on model calls, and announces them on the heartbeat. */
function announceLimits(
  config: WorkerConfig,
  budget: BudgetInput,
  limits: Required<MemoryLimits>,
  info: WorkerInfo,
  logger: Logger,
): void {
  logger.info(
    {
      budgetMiB: config.WORKER_MEMORY_MB,
      callBudgetMiB: Math.round(limits.callBudgetBytes / 2 ** 20),
      batchMaxSize: limits.maxSize,
      batchMaxTokens: limits.maxPaddedTokens,
      longestInput: limits.longest,
    },
    'model calls bounded by the memory budget',
  );
  Object.assign(info, {
    batchMaxSize: limits.maxSize,
    batchMaxTokens: limits.maxPaddedTokens,
    memoryBudgetBytes: budget.budgetBytes,
  } satisfies Partial<WorkerInfo>);
}

/** The largest batch the settings allow (BATCH_MAX_SIZE rows, BATCH_MAX_TOKENS in all), of the warm-up's tokens. */
function largestBatch(config: WorkerConfig, loaded: LoadedModel, engine: Engine, warmText: string): Encoded[] {
  const rows = config.BATCH_MAX_SIZE;
  const length = Math.max(2, Math.min(loaded.maxLength, Math.floor(config.BATCH_MAX_TOKENS / rows)));
  const sample = engine.encode(warmText, true);
  const longest = { text: warmText, ids: [sample.ids[0], ...Array<number>(length - 1).fill(sample.ids[1])] };
  return Array.from({ length: rows }, () => longest);
}

/**
 * A sentence-transformers model whose Dense modules run after its pooling needs an export that runs
 * them too (its sentence_embedding output): tserve has no Dense weights of its own to run. Without
 * that output its embeddings would be the pooled vector, silently wrong: the load fails, naming them.
 */
function checkSentenceHead(model: string, loaded: LoadedModel, names: SessionNames): void {
  const dense = loaded.sentence?.dense ?? [];
  if (!dense.length || names.outputs.includes('sentence_embedding')) return;
  throw new ModelLoadError(
    `cannot serve model "${model}": its modules.json has Dense module${dense.length > 1 ? 's' : ''} ${dense.join(', ')} after its pooling, ` +
      `and its ONNX file does not run them (its outputs are ${names.outputs.join(', ')}, with no sentence_embedding); ` +
      'export it with its sentence-transformers head (a sentence_embedding output)',
  );
}

/** What the load log says of how an embedding model makes its embedding: pooling, head, length, prompts. */
function embeddingLog(loaded: LoadedModel): Record<string, unknown> {
  if (!loaded.sentence) return {};
  const { pooling, dense, normalize, includePrompt } = loaded.sentence;
  return {
    pooling: pooling.join('+'),
    ...(dense.length ? { head: `${dense.join(', ')} in the ONNX graph (sentence_embedding)` } : {}),
    normalize,
    ...(includePrompt ? {} : { includePrompt }),
    maxSeqLength: loaded.maxLength,
    paddingSide: loaded.paddingSide,
    prompts: Object.keys(loaded.prompts),
    ...(loaded.defaultPrompt ? { defaultPrompt: loaded.defaultPrompt } : {}),
  };
}

/** Best effort, bounded: the gateway then answers 503 with this reason instead of 404 for the model. */
async function leaveFailureReport(target: RedisSettings, prefix: string, model: string, reason: string): Promise<void> {
  const redis = createRedis(target, 'gateway', 1000);
  try {
    await whenReady(redis, 1000);
    await reportLoadFailure(redis, prefix, { model, reason, at: Date.now() });
  } catch {
    // Redis unreachable too: the message on stderr is all there is.
  } finally {
    redis.disconnect();
  }
}
