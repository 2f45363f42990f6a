import type { Request, RequestHandler, Response } from 'express';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { RequestTiming, WorkerInfo } from '@tserve/contract';
import type { InferenceObserver } from '../serving/inference.js';
import type { ApiKey } from '../admission/api-keys.js';
import type { QuotaReason } from '../admission/quotas.js';
import type { Snapshot } from '../serving/snapshot.js';
import type { UnreadAnswers } from '../http/unread-answers.js';
import type { BodyBudget } from '../admission/overload.js';
import type { Transport } from '../transport/index.js';
import type { ResponseCache } from '../serving/response-cache.js';

/** Latencies of a server whose model calls take about a millisecond and whose deadline is tens of seconds. */
const SECONDS_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256];
const BREAKER_STATES = ['closed', 'open', 'half-open'] as const;

/**
 * Status label of a request whose client left before it was answered (nginx's convention), so
 * that abandoned requests are counted apart from answered ones.
 */
const CLIENT_CLOSED = '499';

/**
 * A sub-app whose own routes are not worth telling apart (the dashboard, its assets and API) names
 * the label all its requests share.
 */
export function labelRoute(res: Response, label: string): void {
  res.locals.routeLabel = label;
}

/**
 * The route pattern that served a request (`/models/*id`), never the raw URL: a label per model id
 * or per mistyped path would grow without bound. Every route is on the app itself (a sub-app names
 * its label), so the pattern is the whole path. `req.baseUrl` is no part of it: read when the
 * response closes, it is the mount path of whatever middleware answered last, such as a protocol's
 * error handler under `/v1`, which would make `/v1/v1/embeddings` of an error.
 */
export function routeOf(req: Request, res: Response): string {
  const named: unknown = res.locals?.routeLabel;
  if (typeof named === 'string') return named;
  const route = (req as { route?: { path?: unknown } }).route;
  return typeof route?.path === 'string' ? route.path : 'unmatched';
}

export interface GatewayMetrics extends InferenceObserver {
  /** First middleware: counts and times every request when its response closes. */
  track: RequestHandler;
  /** A request refused with 429, by key name (never its secret). */
  quotaRejected: (key: ApiKey, reason: QuotaReason) => void;
  /** A client connection closed on arrival: the gateway already held MAX_CONNECTIONS, or its client MAX_CONNECTIONS_PER_CLIENT. */
  connectionDropped: () => void;
  /** Answers `GET /metrics`, in the Prometheus text format. */
  scrape: RequestHandler;
}

/** What the metrics read when scraped: each part counts its own events. */
export interface MetricSources {
  snapshot: Snapshot;
  transport: Pick<Transport, 'abandoned' | 'skipped' | 'enqueued'>;
  bodies: Pick<BodyBudget, 'held'>;
  unread: Pick<UnreadAnswers, 'held' | 'closed'>;
  /** The response cache, when RESPONSE_CACHE_TTL_S turns it on; its series exist only then. */
  cache?: Pick<ResponseCache, 'counts' | 'bytes' | 'storedBytes'>;
}

/**
 * The gateway's metrics, in a prom-client Registry of its own (`series`, not prom-client's global
 * one) so that two apps in one process, as in tests, never share or double-register series. What
 * other parts count (queue depth, workers, the breaker, abandoned requests, unread answers) is read
 * from them when scraped, so it costs nothing between scrapes.
 */
export function createMetrics({ snapshot, transport, bodies, unread, cache }: MetricSources): GatewayMetrics {
  const series = new Registry();
  collectDefaultMetrics({ register: series });
  const registers = [series];

  const requests = new Counter({
    name: 'tserve_http_requests_total',
    help: 'HTTP requests answered, by method, route pattern and status code (499: the client left first)',
    labelNames: ['method', 'route', 'status'] as const,
    registers,
  });
  const duration = new Histogram({
    name: 'tserve_http_request_duration_seconds',
    help: 'Time from receiving a request to finishing its response, by method, route pattern and status code',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: SECONDS_BUCKETS,
    registers,
  });
  const queueWait = new Histogram({
    name: 'tserve_queue_wait_seconds',
    help: 'Time a request waited from enqueue to the start of the model call that ran it, by model (answered requests)',
    labelNames: ['model'] as const,
    buckets: SECONDS_BUCKETS,
    registers,
  });
  const inference = new Histogram({
    name: 'tserve_inference_duration_seconds',
    help: 'Model time of a request, tokenization and post-processing included, by model (answered requests)',
    labelNames: ['model'] as const,
    buckets: SECONDS_BUCKETS,
    registers,
  });
  const batchSize = new Histogram({
    name: 'tserve_batch_size',
    help: 'Sequences in the model call that ran a request (the largest if several), by model (answered requests)',
    labelNames: ['model'] as const,
    buckets: BATCH_BUCKETS,
    registers,
  });
  new Counter({
    name: 'tserve_requests_abandoned_total',
    help: 'Requests whose client left before the answer, by model and where they were dropped: gateway (never enqueued) or queue (workers told to skip them)',
    labelNames: ['model', 'at'] as const,
    registers,
    collect() {
      this.reset();
      for (const [model, counts] of transport.abandoned)
        for (const [at, n] of Object.entries(counts)) this.inc({ model, at }, n);
    },
  });
  new Counter({
    name: 'tserve_jobs_enqueued_total',
    help: "BullMQ jobs this gateway added to each model's queue; each carries the requests that arrived while the model's last job was on its way",
    labelNames: ['model'] as const,
    registers,
    collect() {
      this.reset();
      for (const [model, n] of transport.enqueued) this.inc({ model }, n);
    },
  });
  new Counter({
    name: 'tserve_requests_skipped_total',
    help: 'Abandoned requests a worker skipped unrun (the rest had already started when the worker heard)',
    labelNames: ['model'] as const,
    registers,
    collect() {
      this.reset();
      for (const [model, n] of transport.skipped) this.inc({ model }, n);
    },
  });
  const quotaRejections = new Counter({
    name: 'tserve_quota_rejections_total',
    help: 'Requests refused with 429, by API key name and the limit hit (rate or concurrency)',
    labelNames: ['key', 'reason'] as const,
    registers,
  });
  const droppedConnections = new Counter({
    name: 'tserve_connections_dropped_total',
    help: 'Client connections closed on arrival because the gateway already held MAX_CONNECTIONS, or their client address MAX_CONNECTIONS_PER_CLIENT',
    registers,
  });
  new Counter({
    name: 'tserve_unread_answers_closed_total',
    help: 'Client connections closed with their answer unread: it made no progress for HTTP_SEND_TIMEOUT_MS (stalled), or it had waited longest when the answers waiting to be read passed MAX_UNREAD_ANSWERS_BYTES (over budget)',
    labelNames: ['reason'] as const,
    registers,
    collect() {
      this.reset();
      for (const [reason, n] of Object.entries(unread.closed)) this.inc({ reason }, n);
    },
  });
  new Gauge({
    name: 'tserve_queue_depth',
    help: 'Requests accepted and not yet answered for each served model, and each configured one (MODELS) scaled to zero, over all gateways (this one exactly, the others as of the last registry refresh)',
    labelNames: ['model'] as const,
    registers,
    collect() {
      // Reset first: a model no longer served must drop out, not keep its last value.
      this.reset();
      for (const model of snapshot().models)
        if (model.state === 'served' || model.state === 'idle') this.set({ model: model.id }, model.depth);
    },
  });
  new Gauge({
    name: 'tserve_requests_held',
    help: "Requests this gateway holds for each served model, not yet sent to the model's queue: it sends a model's next job once a worker has taken its last",
    labelNames: ['model'] as const,
    registers,
    collect() {
      this.reset();
      for (const model of snapshot().models) if (model.state === 'served') this.set({ model: model.id }, model.held);
    },
  });
  new Gauge({
    name: 'tserve_request_body_bytes_held',
    help: 'Bytes of request bodies this gateway holds now, at their declared sizes (at most MAX_BODIES_BYTES)',
    registers,
    collect() {
      this.set(bodies.held);
    },
  });
  new Gauge({
    name: 'tserve_unread_answer_bytes_held',
    help: 'Bytes of answers this gateway holds now for clients that have not read them yet (MAX_UNREAD_ANSWERS_BYTES)',
    registers,
    collect() {
      this.set(unread.held);
    },
  });
  new Gauge({
    name: 'tserve_model_download_ratio',
    help: "Share (0 to 1) of a loading model's files downloaded by the worker likely ready first, while it downloads them",
    labelNames: ['model'] as const,
    registers,
    collect() {
      this.reset();
      for (const model of snapshot().models)
        if (model.download) this.set({ model: model.id }, model.download.percent / 100);
    },
  });
  new Gauge({
    name: 'tserve_live_workers',
    help: 'Workers announcing each model; 0 for a model that lost all its workers or that its worker could not load',
    labelNames: ['model'] as const,
    registers,
    collect() {
      this.reset();
      for (const model of snapshot().models)
        if (model.state !== 'loading') this.set({ model: model.id }, model.workers.length);
    },
  });
  new Gauge({
    name: 'tserve_workers',
    help: 'Live workers by model, device (cpu, webgpu, cuda) and dtype',
    labelNames: ['model', 'device', 'dtype'] as const,
    registers,
    collect() {
      this.reset();
      for (const model of snapshot().models) {
        for (const w of model.workers) this.inc({ model: model.id, device: w.device, dtype: w.dtype });
      }
    },
  });
  new Gauge({
    name: 'tserve_model_weights',
    help: 'Live workers by model, hub revision (commit; "local" for a MODEL_DIR folder) and sha256 of the weights file they loaded',
    labelNames: ['model', 'revision', 'sha256'] as const,
    registers,
    collect() {
      this.reset();
      for (const model of snapshot().models) {
        for (const w of model.workers) {
          if (w.weightsSha256) this.inc({ model: model.id, revision: w.revision ?? 'local', sha256: w.weightsSha256 });
        }
      }
    },
  });
  new Counter({
    name: 'tserve_model_busy_seconds_total',
    help: "Seconds each live worker's model has spent in calls since the worker started, as of its last heartbeat; its rate below 1 means the model waited for work",
    labelNames: ['model', 'worker'] as const,
    registers,
    collect() {
      this.reset();
      for (const model of snapshot().models) {
        for (const w of model.workers)
          if (w.modelBusyMs !== undefined) this.inc({ model: model.id, worker: w.id }, w.modelBusyMs / 1000);
      }
    },
  });
  // Each worker's memory, from its heartbeat: what to set its container's limit against (docs/memory.md).
  const workerGauge = (name: string, help: string, read: (w: WorkerInfo) => number | undefined) =>
    new Gauge({
      name,
      help,
      labelNames: ['model', 'worker'] as const,
      registers,
      collect() {
        this.reset();
        for (const model of snapshot().models) {
          for (const w of model.workers) {
            const v = read(w);
            if (v !== undefined) this.set({ model: model.id, worker: w.id }, v);
          }
        }
      },
    });
  workerGauge(
    'tserve_worker_resident_memory_bytes',
    "Each live worker process's resident memory (RSS), as of its last heartbeat",
    (w) => w.rssBytes,
  );
  workerGauge(
    'tserve_worker_peak_resident_memory_bytes',
    'The most resident memory each live worker process has held since it started (VmHWM), as of its last heartbeat',
    (w) => w.peakRssBytes,
  );
  workerGauge(
    'tserve_worker_memory_budget_bytes',
    "Each live worker's WORKER_MEMORY_MB, in bytes, where set",
    (w) => w.memoryBudgetBytes,
  );
  workerGauge(
    'tserve_worker_largest_call_tokens',
    'Padded tokens (rows x longest) of the largest model call each live worker has run since it started: its tensors, and its memory, grew with it',
    (w) => w.largestCallTokens,
  );
  new Gauge({
    name: 'tserve_breaker_state',
    help: 'Circuit breaker state: 1 for the current state, 0 for the others',
    labelNames: ['breaker', 'state'] as const,
    registers,
    collect() {
      const current = snapshot().breaker;
      for (const state of BREAKER_STATES) this.set({ breaker: 'redis', state }, state === current ? 1 : 0);
    },
  });

  if (cache) responseCacheSeries(cache, registers);

  const track: RequestHandler = (req, res, next) => {
    const started = performance.now();
    // 'close' comes once per response, answered or abandoned; 'finish' never comes for the latter.
    res.once('close', () => {
      const labels = {
        method: req.method,
        route: routeOf(req, res),
        status: res.writableFinished ? String(res.statusCode) : CLIENT_CLOSED,
      };
      requests.inc(labels);
      duration.observe(labels, (performance.now() - started) / 1000);
    });
    next();
  };

  return {
    track,
    answered(model: string, timing: RequestTiming) {
      queueWait.observe({ model }, timing.queue_ms / 1000);
      inference.observe({ model }, timing.inference_ms / 1000);
      batchSize.observe({ model }, timing.batch_size);
    },
    quotaRejected(key: ApiKey, reason: QuotaReason) {
      quotaRejections.inc({ key: key.name, reason });
    },
    connectionDropped() {
      droppedConnections.inc();
    },
    async scrape(_req, res) {
      const body = await series.metrics();
      res.setHeader('content-type', series.contentType);
      res.setHeader('cache-control', 'no-store');
      res.send(body);
    },
  };
}

/** The response cache's series: inputs answered from it and computed, and the bytes it holds. */
function responseCacheSeries(cache: NonNullable<MetricSources['cache']>, registers: Registry[]): void {
  const perModel = (name: string, help: string, read: (counts: { hits: number; misses: number }) => number) =>
    new Counter({
      name,
      help,
      labelNames: ['model'] as const,
      registers,
      collect() {
        this.reset();
        for (const [model, counts] of cache.counts) this.inc({ model }, read(counts));
      },
    });
  perModel('tserve_response_cache_hits_total', 'Inputs answered from the response cache, by model', (c) => c.hits);
  perModel(
    'tserve_response_cache_misses_total',
    'Inputs looked up in the response cache and not found there (then computed), by model',
    (c) => c.misses,
  );
  new Counter({
    name: 'tserve_response_cache_stored_bytes_total',
    help: 'Bytes of entries this gateway stored in the response cache, counted as its bound counts them',
    registers,
    collect() {
      this.reset();
      this.inc(cache.storedBytes);
    },
  });
  new Gauge({
    name: 'tserve_response_cache_bytes',
    help: "Bytes the response cache holds in Redis (all gateways), as counted at this gateway's last store; RESPONSE_CACHE_MAX_MB bounds it",
    registers,
    collect() {
      this.set(cache.bytes);
    },
  });
}
