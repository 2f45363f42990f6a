#!/usr/bin/env node
import os from 'node:os';
import { ConfigError, formatHelp, loadWorkerConfig } from '@tserve/config';
import { PROTOCOL, type WorkerInfo } from '@tserve/contract';
import { createLogger, startTracing, TracingConfigError } from '@tserve/telemetry';
import { assertRedisAccepts, createRedis, RedisSettingsError } from '@tserve/queue';
import { ModelLoadError } from './model/model.js';
import { containerLimits, defaultWorkerMemoryMiB } from './model/container-limits.js';
import { Heartbeat } from './transport/heartbeat.js';
import { WorkerTracing } from './pipeline/tracing.js';
import { loadModel } from './startup/load.js';
import { serve } from './startup/serve.js';

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
  const logger = createLogger({
    level: config.LOG_LEVEL,
    format: config.LOG_FORMAT,
    base: { service: 'worker', model: config.MODEL, worker: workerId },
  });
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
  // A Redis that refuses these settings (a password, a certificate) would be retried forever in
  // silence: the worker stops here with the reason instead. One that is down is waited for.
  await assertRedisAccepts(config);
  const publisher = createRedis(config, 'worker', undefined, { enableAutoPipelining: true });
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
  const heartbeat = new Heartbeat({
    redis: publisher,
    prefix: config.QUEUE_PREFIX,
    info,
    everyMs: config.HEARTBEAT_MS,
    ttlMs: config.WORKER_TTL_MS,
    logger,
  });
  await heartbeat.start();
  const worker = await loadModel({ config, memoryDefaulted, info, heartbeat, logger, started });
  const stop = await serve({ config, workerId, publisher, heartbeat, info, worker, traces, logger });

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'stopping: finishing the batch in hand');
    await stop();
    await Promise.allSettled([publisher.quit(), tracing?.shutdown()]);
    logger.info('stopped');
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
}

main().catch((err) => {
  const message =
    err instanceof ModelLoadError || err instanceof ConfigError || err instanceof TracingConfigError
      ? err.message
      : err instanceof RedisSettingsError
        ? `worker: ${err.message}`
        : `worker failed: ${String(err)}`;
  process.stderr.write(`${message}\n`);
  process.exit(1);
});
