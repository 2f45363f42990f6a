import express, { type Express, type RequestHandler } from 'express';
import type { Logger } from 'pino';
import { ApiError, clip } from '@tserve/contract';
import type { GatewayConfig } from '@tserve/config';
import type { InferenceService } from './serving/inference.js';
import type { ModelRegistry } from './serving/model-registry.js';
import type { Transport } from './transport/index.js';
import type { Snapshot } from './serving/snapshot.js';
import type { Admission } from './admission/admission.js';
import type { QueueDepth } from './admission/overload.js';
import { inferenceRoutes } from './protocols/inference-api.js';
import { healthRoutes } from './ops/health.js';
import { errorHandler } from './http/http-errors.js';
import { refuseDeclaredOversize } from './http/declared-size.js';
import { underRootPath } from './http/root-path.js';
import type { GatewayMetrics } from './ops/metrics.js';
import { requestLog } from './ops/request-log.js';
import { assignRequestId } from './http/request-id.js';
import { DASHBOARD_PATH, dashboard } from './ops/dashboard.js';
import { openAiRoutes } from './protocols/openai.js';
import { teiRoutes } from './protocols/tei.js';
import { cohereRoutes } from './protocols/cohere.js';
import { kserveRoutes } from './protocols/kserve.js';
import { infinityRoutes } from './protocols/infinity.js';
import { ollamaRoutes } from './protocols/ollama.js';
import { cohereEmbedRoutes } from './protocols/cohere-embed.js';
import { sagemakerRoutes } from './protocols/sagemaker.js';
import { openApiRoutes } from './ops/openapi.js';
import { openAiFileRoutes } from './protocols/openai-files.js';
import { openAiBatchRoutes } from './protocols/openai-batches.js';
import type { FileStore } from './offline/files.js';
import type { BatchStore } from './offline/batches.js';

export interface AppParts {
  config: GatewayConfig;
  logger: Logger;
  service: InferenceService;
  registry: ModelRegistry;
  /** Each model's BullMQ queue, for the dashboard. */
  transport: Pick<Transport, 'queue'>;
  snapshot: Snapshot;
  metrics: GatewayMetrics;
  /** "May this request enter": asked by every route that runs a model. */
  admission: Admission;
  /** A model's requests accepted and not yet answered, over all gateways. */
  depth: Pick<QueueDepth, 'of'>;
  /** The server span of each request that runs a model, where tracing is on. */
  traceRequests?: RequestHandler;
  /** OpenAI's Batch API: its files, its batches, and the runner to tell of a new one. */
  offline: { files: FileStore; batches: BatchStore; started: () => void };
}

/** What the gateway answers, for `--help` and for a request to any other route. */
export const ROUTES = `POST /, POST /models/<model id>, POST /v1/embeddings, GET /v1/models, POST /embeddings, GET /models, POST /classify, POST /embed, /embed_all, /embed_sparse, /predict, /rerank, /similarity, /tokenize, /decode, /vertex, GET /info, POST /v1/rerank, /v2/rerank, /v1/embed, /v2/embed, POST /api/embed, /api/embeddings, GET /api/tags, /api/version, /v1/files, /v1/batches, GET /v2/health/ready, /v2/models/<name>, POST /v2/models/<name>/infer, POST /invocations, GET /ping, GET /health, GET /ready, GET /backlog?model=<model id>, GET /metrics, GET /openapi.json, /docs, ${DASHBOARD_PATH}`;

export function createApp(parts: AppParts): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  const { metrics, admission } = parts;
  // First, so that every request is counted, named and logged, refused and unknown ones included.
  app.use(metrics.track);
  if (parts.traceRequests) app.use(parts.traceRequests);
  app.use(assignRequestId);
  app.use(requestLog(parts.logger));
  if (parts.config.ROOT_PATH) app.use(underRootPath(parts.config.ROOT_PATH));
  // Routes go on the app itself, not in a router each: an error (every 503 of shedding among them)
  // leaves a router through setImmediate before the handler below answers it, and under load that
  // turn of the event loop waits behind all the I/O ready by then.
  // Before the bound on bodies: a batch's file has a bound of its own (FILES_MAX_MB).
  const { config, logger } = parts;
  openAiFileRoutes(app, { files: parts.offline.files, admission, logger });
  openAiBatchRoutes(app, { config, admission, logger, ...parts.offline });
  app.use(refuseDeclaredOversize(parts.config.MAX_BODY_BYTES));
  healthRoutes(
    app,
    parts.snapshot,
    parts.depth,
    parts.offline.batches.backlog,
    parts.config.DEFAULT_MODEL,
    parts.config.AIP_HEALTH_ROUTE,
  );
  app.get('/metrics', metrics.scrape);
  openApiRoutes(app, parts.config);
  app.use(DASHBOARD_PATH, dashboard(parts));
  const answerErrors = errorHandler(parts.logger);
  // First of the model routes: it goes on to the served model's own route.
  sagemakerRoutes(app, parts);
  inferenceRoutes(app, parts, answerErrors);
  // The same queue and workers, in the protocols users already have clients for. Cohere's go
  // first: OpenAI's answer the rest of /v1.
  cohereRoutes(app, parts);
  cohereEmbedRoutes(app, parts);
  openAiRoutes(app, parts);
  teiRoutes(app, parts);
  infinityRoutes(app, parts);
  ollamaRoutes(app, parts);
  kserveRoutes(app, parts);
  app.use((req, _res, next) =>
    next(new ApiError('not_found', `no route for ${clip(req.method)} ${clip(req.path)}; see ${ROUTES}`)),
  );
  app.use(answerErrors);
  return app;
}
