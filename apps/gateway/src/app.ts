import express, { type Express } from 'express';
import type { Logger } from 'pino';
import { ApiError } from '@tserve/contract';
import type { GatewayConfig } from '@tserve/config';
import type { InferenceService } from './inference.js';
import type { ModelRegistry } from './model-registry.js';
import type { RedisBreaker } from './breaker.js';
import { inferenceRoutes } from './routes.js';
import { healthRoutes } from './health.js';
import { errorHandler } from './http-errors.js';

export interface AppParts {
  config: GatewayConfig;
  logger: Logger;
  service: InferenceService;
  registry: ModelRegistry;
  breaker: RedisBreaker;
}

export function createApp(parts: AppParts): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use(healthRoutes(parts.registry, parts.breaker, parts.config.DEFAULT_MODEL));
  app.use(inferenceRoutes(parts.config, parts.service));
  app.use((req, _res, next) => next(new ApiError('not_found', `no route for ${req.method} ${req.path}; see POST /, POST /models/<model id>, GET /health, GET /ready`)));
  app.use(errorHandler(parts.logger));
  return app;
}
