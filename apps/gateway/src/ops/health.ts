import type { IRouter, RequestHandler } from 'express';
import { ApiError, batchWarning, type BacklogBody, type ReadyBody, type ReadyModel } from '@tserve/contract';
import { describeRedisFailure } from '@tserve/queue';
import type { GatewaySnapshot, ModelReport, Snapshot } from '../serving/snapshot.js';

function readyModel(m: ModelReport): ReadyModel {
  switch (m.state) {
    case 'served':
      return {
        task: m.task,
        workers: m.workers.length,
        queue_depth: m.depth,
        held: m.held,
        devices: [...new Set(m.workers.map((w) => `${w.device}/${w.dtype}`))],
        ...batchWarning(m.workers),
        ...(m.weights?.revision ? { revision: m.weights.revision } : {}),
        ...(m.weights?.sha256 ? { weights_sha256: m.weights.sha256 } : {}),
        ...(m.weights?.file ? { weights_file: m.weights.file } : {}),
      };
    case 'lost':
      return { task: m.task, workers: 0 };
    case 'failed':
    case 'mismatched':
      return { workers: 0, error: m.error };
    case 'idle':
      return {
        ...(m.task ? { task: m.task } : {}),
        workers: 0,
        scaled_to_zero: true,
        queue_depth: m.depth,
        estimated_time: m.estimatedSeconds,
      };
    case 'loading':
      return {
        workers: 0,
        loading: true,
        estimated_time: m.estimatedSeconds,
        ...(m.download
          ? {
              download: {
                file: m.download.file,
                percent: m.download.percent,
                bytes: m.download.bytes,
                total_bytes: m.download.totalBytes,
                bytes_per_second: m.download.bytesPerSecond,
              },
            }
          : {}),
      };
  }
}

/** What keeps the gateway from serving, one sentence each; none when it is ready (`/ready`, and gRPC's health service). */
export function notReadyReasons(snap: GatewaySnapshot, defaultModel?: string): string[] {
  const reasons: string[] = [];
  // A Redis that answers reads and refuses writes (out of memory) passes the registry's reads: the breaker names it.
  if (!snap.redisHealthy)
    reasons.push(
      snap.redisError ? `${describeRedisFailure(snap.redisError)} (${snap.redisError})` : 'Redis is not answering',
    );
  if (snap.breaker === 'open') reasons.push(`circuit breaker to Redis is open: ${snap.breakerCause ?? 'Redis failed'}`);
  // A model scaled to zero is no fault: the gateway must stay ready (in the Service) to take the request that wakes a worker.
  if (!snap.models.some((m) => m.state === 'served' || m.state === 'loading' || m.state === 'idle'))
    reasons.push('no live worker serves any model');
  for (const m of snap.models) {
    if (m.state === 'lost') reasons.push(`model ${m.id} has no live worker`);
    if (m.state === 'failed') reasons.push(`model ${m.id} is not served: ${m.error}`);
    if (m.state === 'mismatched') reasons.push(m.error!);
    if (m.state === 'loading') {
      const downloading = m.download ? `, downloading: ${m.download.percent}%` : '';
      reasons.push(`model ${m.id} is loading (about ${m.estimatedSeconds} s${downloading})`);
    }
  }
  if (defaultModel && !snap.models.some((m) => m.id === defaultModel))
    reasons.push(`default model ${defaultModel} has no live worker`);
  return reasons;
}

/**
 * `/health`: the process answers. `/ready`: it can serve: Redis answers, the breaker is closed, and
 * every model it has seen (and DEFAULT_MODEL) has a live worker, none still loading, except one
 * configured (MODELS) with no worker at all: scaled to zero, it is served by waking a worker. 503
 * says which of these is missing.
 */
export function healthRoutes(
  router: IRouter,
  snapshot: Snapshot,
  /** A model's requests accepted and not yet answered, over all gateways. */
  depth: { of(model: string): number },
  /** A model's lines of batches not yet answered. */
  batchLines: (model: string) => Promise<number>,
  defaultModel?: string,
  /** Vertex AI's health route (AIP_HEALTH_ROUTE), where set. */
  platformHealth?: string,
): void {
  router.get('/health', (_req, res) => {
    res.json({ status: 'ok' });
  });
  // SageMaker's and Vertex AI's health checks: they send traffic once it answers 200, as /ready does.
  const ready: RequestHandler = (_req, res) => {
    const snap = snapshot();
    const reasons = notReadyReasons(snap, defaultModel);
    const body: ReadyBody = {
      status: reasons.length ? 'unavailable' : 'ready',
      reasons,
      breaker: snap.breaker,
      models: Object.fromEntries(snap.models.map((m) => [m.id, readyModel(m)])),
    };
    if (reasons.length) res.setHeader('Retry-After', '2');
    res.status(reasons.length ? 503 : 200).json(body);
  };
  for (const path of ['/ready', '/ping', ...(platformHealth ? [platformHealth] : [])]) router.get(path, ready);
  // What the autoscaler reads (KEDA's metrics-api trigger): a model's requests accepted and not yet
  // answered, over all gateways, so that any one gateway behind the Service answers for the cluster,
  // and the lines of its batches still to run, which no queue holds yet. Always 200 while the
  // process runs: KEDA treats any other status as a failed read (a batch count Redis cannot give
  // is left out).
  router.get('/backlog', async (req, res, next) => {
    const model = req.query.model;
    if (typeof model !== 'string' || model === '')
      return next(new ApiError('validation', 'GET /backlog needs ?model=<model id>'));
    const lines = await batchLines(model).catch(() => 0);
    res.setHeader('cache-control', 'no-store');
    res.json({ model, backlog: depth.of(model) + lines } satisfies BacklogBody);
  });
}
