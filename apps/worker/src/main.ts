#!/usr/bin/env node
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino, type Logger } from 'pino';
import { ConfigError, formatHelp, loadWorkerConfig, type WorkerConfig } from '@tserve/config';
import { defaultScoreFunction, PROTOCOL, type WorkerInfo } from '@tserve/contract';
import { startTracing, TracingConfigError } from '@tserve/telemetry';
import {
  clearLoadFailure,
  createRedis,
  keys,
  queueNameFor,
  recordLoadTime,
  reportLoadFailure,
  whenReady,
} from '@tserve/queue';
import {
  chooseRuntime,
  describeModel,
  hubFilePlan,
  localModelFolder,
  ModelLoadError,
  type LoadedModel,
  type Runtime,
  type SessionFile,
} from './model/model.js';
import {
  limitsWithin,
  MemoryBudgetError,
  modelShape,
  residentMemory,
  restingBytes,
  type BudgetInput,
} from './model/memory.js';
import { dtypeFile, int8RowSource, isGpu } from './model/device.js';
import { int8RowWeights, OnnxFormatError, ProtobufError, RewriteError } from './model/int8-row/index.js';
import { fetchModel, hubSettings, sha256File } from './model/download.js';
import { ModelThread } from './model/model-thread.js';
import { Engine } from './model/engine.js';
import { headsFor } from './tasks/index.js';
import { BatchRunner } from './pipeline/runner.js';
import { Consumer } from './pipeline/consumer.js';
import { Intake } from './transport/intake.js';
import { Settling } from './transport/settling.js';
import { Cancellations } from './pipeline/cancellations.js';
import { Heartbeat } from './transport/heartbeat.js';
import { InferenceStatistics } from './pipeline/stats.js';
import { WorkerTracing } from './pipeline/tracing.js';
import { containerLimits, defaultWorkerMemoryMiB } from './model/container-limits.js';

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(
    formatHelp(
      'tserve worker: loads one model once and serves its queue in dynamic batches.\n\nUsage: MODEL=<id> [MODEL_DIR=<dir>] node apps/worker/dist/main.js',
      ['worker', 'common'],
    ) + defaultsHere(),
  );
  process.exit(0);
}

/** What INTRA_OP_THREADS=0 and an unset WORKER_MEMORY_MB come to in this container, for --help. */
function defaultsHere(): string {
  const limits = containerLimits();
  return `\nHere: INTRA_OP_THREADS=0 runs ${limits.cpus} thread(s) (cgroup cpu.max, else the affinity mask); WORKER_MEMORY_MB unset is ${defaultWorkerMemoryMiB(limits.memoryLimitBytes)} (${limits.memoryLimitBytes === undefined ? 'no cgroup memory limit' : 'a quarter under the cgroup memory limit'}).\n`;
}

async function main(): Promise<void> {
  const container = containerLimits();
  const settings = loadWorkerConfig();
  // The container's CPUs and memory where the settings leave them open; memoryDefaulted: a budget the operator did not ask for gives way where it cannot apply.
  const memoryDefaulted = settings.WORKER_MEMORY_MB === undefined;
  const config = {
    ...settings,
    INTRA_OP_THREADS: settings.INTRA_OP_THREADS > 0 ? settings.INTRA_OP_THREADS : container.cpus,
    WORKER_MEMORY_MB: settings.WORKER_MEMORY_MB ?? defaultWorkerMemoryMiB(container.memoryLimitBytes),
  };
  const workerId = config.WORKER_ID ?? `${os.hostname()}-${process.pid}`;
  const logger = pino({ level: config.LOG_LEVEL, base: { service: 'worker', model: config.MODEL, worker: workerId } });
  const tracing = await startTracing('tserve-worker');
  if (tracing) logger.info('tracing on: exporting spans over OTLP (docs/tracing.md)');
  const traces = tracing && new WorkerTracing(tracing);
  logger.info(
    {
      intraOpThreads: config.INTRA_OP_THREADS,
      threadsFrom: settings.INTRA_OP_THREADS > 0 ? 'INTRA_OP_THREADS' : 'container CPUs',
      workerMemoryMiB: config.WORKER_MEMORY_MB,
      memoryFrom: memoryDefaulted
        ? container.memoryLimitBytes === undefined
          ? 'default (no memory limit)'
          : 'a quarter under the memory limit'
        : 'WORKER_MEMORY_MB',
    },
    'threads and memory',
  );

  const started = performance.now();
  const publisher = createRedis(config.REDIS_URL, 'worker', undefined, { enableAutoPipelining: true });
  // Announced while loading, so that the gateway answers "loading" for this model, not "not served".
  const info: WorkerInfo = {
    kind: 'worker',
    protocol: PROTOCOL,
    id: workerId,
    model: config.MODEL,
    state: 'loading',
    dtype: config.DTYPE,
    device: config.DEVICE,
    pid: process.pid,
    host: os.hostname(),
    startedAt: Date.now(),
    batchMaxSize: config.BATCH_MAX_SIZE,
    batchMaxTokens: config.BATCH_MAX_TOKENS,
    batchMaxWaitMs: config.BATCH_MAX_WAIT_MS,
    maxTokens: 0,
  };
  const heartbeat = new Heartbeat(
    publisher,
    config.QUEUE_PREFIX,
    info,
    config.HEARTBEAT_MS,
    config.WORKER_TTL_MS,
    logger,
  );
  await heartbeat.start();
  const reportFailure = async (err: unknown) => {
    await heartbeat.stop();
    if (err instanceof ModelLoadError)
      await leaveFailureReport(config.REDIS_URL, config.QUEUE_PREFIX, config.MODEL, err.message);
    throw err;
  };
  // Before the model thread exists: Linux threads inherit their creator's niceness, so the model
  // thread and ONNX Runtime's pool get it, while a gateway beside them keeps its normal priority.
  if (config.WORKER_NICE !== 0) {
    try {
      os.setPriority(config.WORKER_NICE);
    } catch (err) {
      logger.warn(
        { err: String(err), nice: config.WORKER_NICE },
        "could not change the worker's priority; running at the default",
      );
    }
  }
  // A hub model is downloaded into the cache first (its progress rides on the heartbeat), then
  // loaded from there like a MODEL_DIR model.
  const source = await locateModel(config, info, logger).catch(reportFailure);
  // Config and tokenizer first: a model that is not there is reported by its path.
  const loaded = await describeModel(config, source.dir).catch(reportFailure);
  const runtime = await Promise.resolve()
    .then(() => chooseRuntime(config, source.dir))
    .catch(reportFailure);
  for (const warning of runtime.warnings) logger.warn(warning);
  const budget = await Promise.resolve()
    .then(() => memoryBudget(config, memoryDefaulted, loaded, runtime, logger))
    .catch(reportFailure);
  const prepared = await weightsToLoad(config, runtime, source, logger).catch(reportFailure);
  // The model thread loads exactly what was chosen here.
  const resolved = { ...config, DEVICE: runtime.device, DTYPE: prepared.dtype };
  Object.assign(info, { device: runtime.device, dtype: prepared.dtype } satisfies Partial<WorkerInfo>);
  const weights = prepared.describe;
  // Which weights answer, named by their hash: computed once, while the model thread loads them.
  const [thread, weightsSha256] = await Promise.all([
    ModelThread.start(resolved, loaded.task, prepared.dir, prepared.file, (reason) => {
      // Its jobs stay locked until the lock expires; then another worker's stalled check runs them.
      logger.fatal({ reason }, 'model thread died; exiting');
      process.exit(1);
    }),
    prepared.sha256 ?? source.sha256.get(weights) ?? sha256File(path.join(source.dir, weights)),
  ]).catch(reportFailure);
  Object.assign(info, { weightsSha256, weightsFile: weights } satisfies Partial<WorkerInfo>);
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
  // What the worker holds at rest is measured now, with the session's weights and its first call's
  // buffers in, and taken where it is more than the estimate.
  const limits =
    budget &&
    (await Promise.resolve()
      .then(() =>
        boundedCalls(config.MODEL, {
          ...budget,
          restingBytes: Math.max(budget.restingBytes, residentMemory().rssBytes),
        }),
      )
      .catch(reportFailure));
  if (budget && limits) {
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
  const batchLimits = limits ?? { maxSize: config.BATCH_MAX_SIZE, maxPaddedTokens: config.BATCH_MAX_TOKENS };
  if (isGpu(runtime.device)) {
    // A GPU compiles its kernels for each new shape: the largest batch is paid here, not by the first users.
    const rows = config.BATCH_MAX_SIZE;
    const length = Math.max(2, Math.min(loaded.maxLength, Math.floor(config.BATCH_MAX_TOKENS / rows)));
    const sample = engine.encode(warmText, true);
    const longest = { text: warmText, ids: [sample.ids[0], ...Array<number>(length - 1).fill(sample.ids[1])] };
    await engine.forward(Array.from({ length: rows }, () => longest)).catch(reportFailure);
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
    },
    'model loaded',
  );

  const connection = createRedis(config.REDIS_URL, 'worker');
  const cancellationChannel = createRedis(config.REDIS_URL, 'subscriber');
  // Data flows one way: the intake fetches jobs, the runner runs their requests, the settling settles the jobs.
  const intake = new Intake(
    connection,
    {
      prefix: config.QUEUE_PREFIX,
      model: config.MODEL,
      workerId,
      lockMs: config.JOB_LOCK_MS,
      stalledIntervalMs: config.STALLED_INTERVAL_MS,
    },
    logger,
  );
  const cancelled = new Cancellations();
  const settling = new Settling(
    publisher,
    cancelled,
    { prefix: config.QUEUE_PREFIX, model: config.MODEL, token: workerId },
    logger,
  );
  const runner = new BatchRunner({
    engine,
    heads: headsFor(loaded),
    limits: batchLimits,
    outcomes: traces ? traces.sink(settling) : settling,
    isAbandoned: (id) => cancelled.has(id),
    maxAnswerValues: config.MAX_ANSWER_VALUES,
    stats,
    calls: traces,
  });
  const consumer = new Consumer(
    intake,
    runner,
    settling,
    {
      limits: { maxSize: batchLimits.maxSize, maxWaitMs: config.BATCH_MAX_WAIT_MS },
      hasPeers: () => heartbeat.peers > 0,
    },
    logger,
  );
  cancellationChannel.on('message', (_channel: string, message: string) => {
    if (!cancelled.note(message)) logger.warn('unreadable cancellation message');
  });
  await cancellationChannel.subscribe(keys.cancellations(config.QUEUE_PREFIX, config.MODEL));

  await clearLoadFailure(publisher, config.QUEUE_PREFIX, config.MODEL).catch(() => {});
  await recordLoadTime(publisher, config.QUEUE_PREFIX, config.MODEL, loadMs).catch(() => {});
  consumer.start();
  const classifies = ['text-classification', 'zero-shot-classification', 'token-classification'].includes(loaded.task);
  const labels =
    classifies && loaded.config.id2label
      ? Object.keys(loaded.config.id2label)
          .sort((a, b) => Number(a) - Number(b))
          .map((i) => loaded.config.id2label![i])
      : undefined;
  const scoreFunction = loaded.tasks.includes('text-classification') ? defaultScoreFunction(loaded.config) : undefined;
  delete info.download;
  Object.assign(info, {
    state: 'ready',
    task: loaded.task,
    tasks: loaded.tasks,
    labels,
    scoreFunction,
    maxTokens: loaded.maxLength,
  } satisfies Partial<WorkerInfo>);
  await heartbeat.beat();
  logger.info({ queue: queueNameFor(config.MODEL) }, 'worker ready');

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'stopping: finishing the batch in hand');
    // Gateways stop counting on this worker at once, and see it live while it finishes what it holds.
    await heartbeat.drain();
    await consumer.stop();
    await heartbeat.stop();
    await thread.stop();
    await Promise.allSettled([connection.quit(), publisher.quit(), cancellationChannel.quit(), tracing?.shutdown()]);
    logger.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
}

/**
 * The file the model thread loads, and its dtype. int8-row is written from the model's fp32 (else
 * q8) file at first load and cached beside it; `describe` names what runs, for /ready and the log.
 * A file the rewrite cannot take (no MatMul it knows) runs as it is when DTYPE=auto chose int8-row,
 * and fails the load when DTYPE=int8-row asked for it.
 */
async function weightsToLoad(
  config: WorkerConfig,
  runtime: Runtime,
  source: ModelSource,
  logger: Logger,
): Promise<{ dtype: Runtime['dtype']; dir: string; file: SessionFile; describe: string; sha256?: string }> {
  const model = config.MODEL;
  const asItIs = (dtype: Exclude<Runtime['dtype'], 'int8-row'>) => ({
    dtype,
    dir: source.dir,
    file: { dtype },
    describe: dtypeFile(dtype),
  });
  if (runtime.dtype !== 'int8-row') return asItIs(runtime.dtype);
  const onnx = path.join(source.dir, 'onnx');
  const from = int8RowSource(fs.existsSync(onnx) ? fs.readdirSync(onnx) : []);
  const file = dtypeFile(from);
  try {
    const sha256 = source.sha256.get(file) ?? (await sha256File(path.join(source.dir, file)));
    const started = performance.now();
    const rows = await int8RowWeights(source.dir, { file, sha256, from }, hubSettings(config).cacheDir);
    const to = path.join(rows.dir, rows.file);
    if (rows.written)
      logger.info(
        { from: file, to, ...rows.written, ms: Math.round(performance.now() - started) },
        'wrote the int8-row file',
      );
    else logger.info({ from: file, to }, 'int8-row file found in the cache');
    return {
      dtype: 'int8-row',
      dir: rows.dir,
      file: { dtype: 'fp32', fileName: rows.fileName },
      describe: `${file}+${rows.rewrite}`,
      sha256: rows.sha256,
    };
  } catch (err) {
    if (err instanceof RewriteError && config.DTYPE === 'auto') {
      logger.warn({ file, reason: err.message }, 'int8-row cannot be written from this file; running it as it is');
      return asItIs(from);
    }
    if (
      err instanceof RewriteError ||
      err instanceof OnnxFormatError ||
      err instanceof ProtobufError ||
      (err as NodeJS.ErrnoException).code
    ) {
      throw new ModelLoadError(`cannot load model "${model}" as int8-row from ${file}: ${(err as Error).message}`);
    }
    throw err;
  }
}

interface ModelSource {
  /** The folder the model is loaded from. */
  dir: string;
  /** The hub revision (its commit, where the hub named one); none for MODEL_DIR. */
  revision?: string;
  /** sha256 of the files downloaded by this start. */
  sha256: Map<string, string>;
  /** Time spent getting the files from the hub (resolving and downloading). */
  downloadMs: number;
}

/** MODEL_DIR's folder for the model, or its snapshot in the hub cache, downloaded as needed. */
async function locateModel(config: WorkerConfig, info: WorkerInfo, logger: Logger): Promise<ModelSource> {
  if (config.MODEL_DIR)
    return { dir: localModelFolder(config.MODEL_DIR, config.MODEL), sha256: new Map(), downloadMs: 0 };
  const started = performance.now();
  const hub = hubSettings(config);
  logger.info(
    { endpoint: hub.endpoint, revision: hub.revision, cache: hub.cacheDir, offline: hub.offline },
    'getting the model from the hub',
  );
  const fetched = await fetchModel(
    config.MODEL,
    hub,
    hubFilePlan(config),
    (download) => (info.download = download),
    logger,
  );
  info.revision = fetched.revision;
  return {
    dir: fetched.dir,
    revision: fetched.revision,
    sha256: fetched.sha256,
    downloadMs: performance.now() - started,
  };
}

/**
 * WORKER_MEMORY_MB, checked against the model before it loads: a budget that cannot hold the model
 * at rest fails now, with the reason, rather than after the load or in the kernel's OOM killer. A GPU
 * holds the call's tensors in its own memory, so there the budget bounds nothing.
 */
function memoryBudget(
  config: WorkerConfig,
  defaulted: boolean,
  loaded: LoadedModel,
  runtime: Runtime,
  logger: Logger,
): BudgetInput | undefined {
  if (config.WORKER_MEMORY_MB === undefined) return undefined;
  if (isGpu(runtime.device)) {
    if (!defaulted)
      logger.warn(
        { device: runtime.device },
        'WORKER_MEMORY_MB bounds the model calls of CPU workers only; ignored on a GPU',
      );
    return undefined;
  }
  const shape = modelShape(loaded.config);
  if (!shape && defaulted) {
    logger.warn(
      'no memory budget: the model config names no hidden size, attention heads or layers; BATCH_MAX_TOKENS bounds its calls',
    );
    return undefined;
  }
  if (!shape) {
    throw new ModelLoadError(
      `cannot bound model "${config.MODEL}" by WORKER_MEMORY_MB: its config.json names no hidden size, attention heads or layers; unset WORKER_MEMORY_MB and bound its calls with BATCH_MAX_TOKENS`,
    );
  }
  const input = {
    budgetBytes: config.WORKER_MEMORY_MB * 2 ** 20,
    restingBytes: restingBytes(shape, runtime.dtype),
    shape,
    maxSize: config.BATCH_MAX_SIZE,
    maxPaddedTokens: config.BATCH_MAX_TOKENS,
    maxLength: loaded.maxLength,
    positions: loaded.positions,
  };
  boundedCalls(config.MODEL, input);
  return input;
}

/** The limits a budget sets; a budget too small for any call fails the worker as a load failure, with the reason. */
function boundedCalls(model: string, input: BudgetInput): ReturnType<typeof limitsWithin> {
  try {
    return limitsWithin(input);
  } catch (err) {
    if (err instanceof MemoryBudgetError) throw new ModelLoadError(`cannot serve model "${model}": ${err.message}`);
    throw err;
  }
}

/** Best effort, bounded: the gateway then answers 503 with this reason instead of 404 for the model. */
async function leaveFailureReport(url: string, prefix: string, model: string, reason: string): Promise<void> {
  const redis = createRedis(url, 'gateway', 1000);
  try {
    await whenReady(redis, 1000);
    await reportLoadFailure(redis, prefix, { model, reason, at: Date.now() });
  } catch {
    // Redis unreachable too: the message on stderr is all there is.
  } finally {
    redis.disconnect();
  }
}

main().catch((err) => {
  const message =
    err instanceof ModelLoadError || err instanceof ConfigError || err instanceof TracingConfigError
      ? err.message
      : `worker failed: ${String(err)}`;
  process.stderr.write(`${message}\n`);
  process.exit(1);
});
