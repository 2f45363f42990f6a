import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { WorkerConfig } from '@tserve/config';
import { defaultScoreFunction, type WorkerInfo } from '@tserve/contract';
import { clearLoadFailure, createRedis, keys, queueNameFor, recordLoadTime } from '@tserve/queue';
import type { LoadedModel } from '../model/model.js';
import { stopModelThread } from '../model/model-thread.js';
import { headsFor } from '../tasks/index.js';
import { ModelBatchRunner } from '../pipeline/runner.js';
import { Consumer } from '../pipeline/consumer.js';
import type { WorkerTracing } from '../pipeline/tracing.js';
import { Cancellations } from '../transport/cancellations.js';
import { TakenJobs } from '../transport/taken-jobs.js';
import { Intake } from '../transport/intake.js';
import { Settling } from '../transport/settling.js';
import type { Heartbeat } from '../transport/heartbeat.js';
import type { LoadedWorker } from './load.js';

export interface ServeParts {
  config: WorkerConfig;
  workerId: string;
  /** Publishes outcomes and records them, tells gateways their jobs are taken, and carries the heartbeat. */
  publisher: Redis;
  heartbeat: Heartbeat;
  info: WorkerInfo;
  worker: LoadedWorker;
  traces?: WorkerTracing;
  logger: Logger;
}

/**
 * Starts taking the model's jobs, and tells the gateways the worker is ready. Resolves with the
 * stop: it finishes the batch in hand, settles it, and closes what this opened.
 */
export async function serve(parts: ServeParts): Promise<() => Promise<void>> {
  const { config, publisher, heartbeat, info, worker, logger } = parts;
  const connection = createRedis(config, 'worker');
  // One subscriber for both of the model's channels: its work notices and its cancellations.
  const channels = createRedis(config, 'subscriber');
  const { intake, cancelled, consumer } = buildPipeline(parts, connection);
  const workChannel = keys.work(config.QUEUE_PREFIX, config.MODEL);
  channels.on('message', (channel: string, message: string) => {
    if (channel === workChannel) {
      if (!intake.noticed(message)) logger.warn('unreadable work notice');
    } else if (!cancelled.note(message)) logger.warn('unreadable cancellation message');
  });
  // Before the first fetch: a job added after it is announced to this worker.
  await channels.subscribe(workChannel, keys.cancellations(config.QUEUE_PREFIX, config.MODEL));

  await clearLoadFailure(publisher, config.QUEUE_PREFIX, config.MODEL).catch(() => {});
  await recordLoadTime(publisher, config.QUEUE_PREFIX, config.MODEL, worker.loadMs).catch(() => {});
  consumer.start();
  delete info.download;
  Object.assign(info, readyInfo(worker.loaded, config.MATRYOSHKA_DIMENSIONS));
  await heartbeat.beat();
  logger.info({ queue: queueNameFor(config.MODEL) }, 'worker ready');

  return async () => {
    // Gateways stop counting on this worker at once, and see it live while it finishes what it holds.
    await heartbeat.drain();
    await consumer.stop();
    await heartbeat.stop();
    await stopModelThread(worker.thread);
    await Promise.allSettled([connection.quit(), channels.quit()]);
  };
}

/** The taken jobs (fetched by the intake, settled by the settling), the runner and the consumer that drives them, on `connection`. */
function buildPipeline(
  { config, workerId, publisher, heartbeat, worker, traces, logger }: ServeParts,
  connection: Redis,
): { intake: Intake; cancelled: Cancellations; consumer: Consumer } {
  const { loaded, engine, stats, batchLimits } = worker;
  // Data flows one way: jobs are taken, the runner runs their requests, and each job is settled.
  const intake = new Intake(
    connection,
    {
      prefix: config.QUEUE_PREFIX,
      model: config.MODEL,
      workerId,
      lockMs: config.JOB_LOCK_MS,
      stalledIntervalMs: config.STALLED_INTERVAL_MS,
      peers: heartbeat,
    },
    logger,
  );
  const cancelled = new Cancellations();
  const settling = new Settling(
    publisher,
    { prefix: config.QUEUE_PREFIX, model: config.MODEL, token: workerId },
    logger,
  );
  const jobs = new TakenJobs({ intake, settling, publisher, cancellations: cancelled, logger });
  const runner = new ModelBatchRunner({
    engine,
    heads: headsFor(loaded),
    limits: batchLimits,
    outcomes: traces ? traces.sink(jobs) : jobs,
    abandoned: cancelled,
    maxAnswerValues: config.MAX_ANSWER_VALUES,
    stats,
    calls: traces,
  });
  const consumer = new Consumer({
    jobs,
    runner,
    limits: { maxSize: batchLimits.maxSize, maxWaitMs: config.BATCH_MAX_WAIT_MS },
    peers: heartbeat,
    logger,
  });
  return { intake, cancelled, consumer };
}

/** What the heartbeat announces once the worker is ready: its tasks, labels, prompts and limits. */
function readyInfo(loaded: LoadedModel, matryoshka: number[] | undefined): Partial<WorkerInfo> {
  const classifies = ['text-classification', 'zero-shot-classification', 'token-classification'].includes(loaded.task);
  const labels =
    classifies && loaded.config.id2label
      ? Object.keys(loaded.config.id2label)
          .sort((a, b) => Number(a) - Number(b))
          .map((i) => loaded.config.id2label![i])
      : undefined;
  const scoreFunction = loaded.tasks.includes('text-classification') ? defaultScoreFunction(loaded.config) : undefined;
  return {
    state: 'ready',
    task: loaded.task,
    tasks: loaded.tasks,
    ...(loaded.splade ? { sparse: true as const } : {}),
    labels,
    scoreFunction,
    maxTokens: loaded.maxLength,
    ...(loaded.sentence
      ? {
          embedding: {
            ...loaded.sentence,
            prompts: loaded.prompts,
            defaultPrompt: loaded.defaultPrompt,
            paddingSide: loaded.paddingSide,
          },
        }
      : {}),
    ...(Object.keys(loaded.prompts).length ? { promptNames: Object.keys(loaded.prompts) } : {}),
    ...(matryoshka && loaded.tasks.includes('feature-extraction') ? { matryoshkaDimensions: matryoshka } : {}),
  };
}
