import { createRequire } from 'node:module';
import path from 'node:path';
import express, { type IRouter } from 'express';
import { backlogBodySchema, errorBodySchema, healthBodySchema, PRIORITIES, readyBodySchema } from '@tserve/contract';
import type { GatewayConfig } from '@tserve/config';
import {
  errors,
  getOperation,
  ok,
  ref,
  type Json,
  type OpenApiOptions,
  type OpenApiPart,
} from '../http/openapi-parts.js';
import { inferenceApiOpenApi } from '../protocols/inference-api-openapi.js';
import { openAiOpenApi } from '../protocols/openai-openapi.js';
import { openAiBatchesOpenApi } from '../protocols/openai-batches-openapi.js';
import { teiOpenApi } from '../protocols/tei-openapi.js';
import { cohereOpenApi } from '../protocols/cohere-openapi.js';
import { infinityOpenApi } from '../protocols/infinity-openapi.js';
import { kserveOpenApi } from '../protocols/kserve-openapi.js';
import { ollamaOpenApi } from '../protocols/ollama-openapi.js';

/**
 * The OpenAPI 3.1 description of every route, assembled from each protocol's part (its paths,
 * described from the zod schemas its routes validate with) and the operations routes'. Served at
 * /openapi.json, and read by a Swagger UI page at /docs whose assets come from the swagger-ui-dist
 * package.
 */

/** Parameters and headers that more than one protocol's routes use; a protocol's own come with its part. */
const PARAMETERS = {
  Model: {
    name: 'model',
    in: 'path',
    required: true,
    description: 'the model id; it may hold a slash (replica/x), sent as is or as %2F',
    schema: { type: 'string' },
  },
  RequestTimeout: {
    name: 'x-request-timeout-ms',
    in: 'header',
    description: "shortens the request's deadline (ms); never beyond REQUEST_TIMEOUT_MS",
    schema: { type: 'integer', minimum: 1 },
  },
  Priority: {
    name: 'x-priority',
    in: 'header',
    description: "the request's class; it may lower its API key's class, never raise it",
    schema: { type: 'string', enum: [...PRIORITIES] },
  },
  UseCache: {
    name: 'x-use-cache',
    in: 'header',
    description:
      'false computes afresh, bypassing the response cache (RESPONSE_CACHE_TTL_S), as options.use_cache: false does',
    schema: { type: 'string', enum: ['true', 'false', '1', '0'] },
  },
  TraceParent: {
    name: 'traceparent',
    in: 'header',
    description:
      "W3C trace context: with tracing on (OTEL_EXPORTER_OTLP_ENDPOINT, docs/tracing.md) the request's spans continue this trace",
    schema: { type: 'string', pattern: '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' },
  },
};

const numberHeader = (description: string) => ({ description, schema: { type: 'number' } });
const HEADERS = {
  RequestId: {
    description: "the request's id (a fresh UUID), named in the gateway's and the worker's logs",
    schema: { type: 'string' },
  },
  RetryAfter: { description: 'seconds to wait before retrying', schema: { type: 'integer' } },
  QueueTime: numberHeader('ms from enqueue to the start of the model call that ran the request'),
  InferenceTime: numberHeader('ms of the model work that ran it'),
  BatchSize: numberHeader('sequences in the model call that ran the request'),
  TotalTime: numberHeader('ms from the gateway handing the request on to its outcome coming back'),
  Cache: {
    description: 'with the response cache on: hit when every input was answered from it (no model call), else miss',
    schema: { type: 'string', enum: ['hit', 'miss'] },
  },
  Warnings: {
    description: 'a JSON list, when there is something to say (an input was truncated)',
    schema: { type: 'string' },
  },
  ModelSha256: { description: 'sha256 of the weights file that answered', schema: { type: 'string' } },
  IgnoredFields: {
    description:
      'the fields of the body no schema here knows, left out (never refused), by their paths, comma-separated (the first 20); absent when there were none',
    schema: { type: 'string' },
  },
  ModelRevision: { description: 'the hub commit those weights came from', schema: { type: 'string' } },
};

const OPERATIONS_TAG = 'Operations';

/** The operations routes: health, readiness, backlog, metrics and this document. */
function operationsPaths(): Record<string, Json> {
  const get = (operationId: string, summary: string, responses: Json, parameters?: Json[]) =>
    getOperation(OPERATIONS_TAG, operationId, summary, responses, parameters);
  return {
    '/health': get('health', 'the process answers', { 200: ok('alive', healthBodySchema) }),
    '/ready': get(
      'ready',
      'the gateway can serve: Redis answers, the breaker is closed, every model has a live worker',
      {
        200: ok('ready', readyBodySchema),
        503: {
          ...ok('not ready: reasons says what is missing', readyBodySchema),
          headers: { 'Retry-After': ref('headers', 'RetryAfter') },
        },
      },
    ),
    '/ping': get('ping', "SageMaker's health check: answers as /ready does", {
      200: ok('ready', readyBodySchema),
      503: {
        ...ok('not ready: reasons says what is missing', readyBodySchema),
        headers: { 'Retry-After': ref('headers', 'RetryAfter') },
      },
    }),
    '/invocations': {
      post: {
        operationId: 'invocations',
        tags: [OPERATIONS_TAG],
        summary:
          "SageMaker's inference route: the served model's own route, as TEI binds it (/embed, /predict, /rerank, /embed_sparse), else POST / (DEFAULT_MODEL or the only model)",
        requestBody: {
          required: true,
          content: {
            'application/json': { schema: { type: 'object', description: "the body of the model's own route" } },
          },
        },
        responses: {
          200: {
            description: "the model's route's answer",
            headers: { 'x-request-id': ref('headers', 'RequestId') },
            content: { 'application/json': { schema: { description: "the answer of the model's own route" } } },
          },
          ...errors(errorBodySchema, [400, 503]),
        },
      },
    },
    '/backlog': get(
      'backlog',
      "a model's requests accepted and not yet answered, over all gateways (what the autoscaler reads)",
      { 200: ok('the backlog', backlogBodySchema), ...errors(errorBodySchema, [400]) },
      [{ name: 'model', in: 'query', required: true, schema: { type: 'string', minLength: 1 } }],
    ),
    '/metrics': get('metrics', 'Prometheus metrics', {
      200: {
        description: 'the metrics, in the Prometheus text format',
        content: { 'text/plain': { schema: { type: 'string' } } },
      },
    }),
    '/openapi.json': get('openApiDocument', 'this document', {
      200: { description: 'the OpenAPI document', content: { 'application/json': {} } },
    }),
    '/docs': get('docsPage', 'this document, read in Swagger UI', {
      200: { description: 'the page', content: { 'text/html': {} } },
    }),
  };
}

/** The OpenAPI 3.1 document of the gateway's routes. */
function openApiDocument(options: OpenApiOptions): Json {
  const parts: OpenApiPart[] = [
    inferenceApiOpenApi(options),
    openAiOpenApi(options),
    openAiBatchesOpenApi(options),
    teiOpenApi(options),
    cohereOpenApi(options),
    infinityOpenApi(options),
    ollamaOpenApi(options),
    kserveOpenApi(options),
    { tag: OPERATIONS_TAG, paths: operationsPaths() },
  ];
  // A path may hold one protocol's POST and another's GET (`/models/{model}`).
  const paths: Record<string, Json> = {};
  for (const part of parts)
    for (const [template, item] of Object.entries(part.paths)) paths[template] = { ...paths[template], ...item };
  for (const [template, item] of Object.entries(paths))
    for (const [method, operation] of Object.entries(item))
      if (!(operation as Json).operationId)
        throw new Error(`openapi: ${method.toUpperCase()} ${template} has no operationId, the name a client gives it`);
  return {
    openapi: '3.1.0',
    info: {
      title: 'tserve',
      version: '0.1.0',
      description:
        "Transformer models behind the Hugging Face Inference API, OpenAI embeddings and its Batch API, TEI, Cohere's rerank and embed, Infinity's classify, Ollama's embeddings and KServe v2, and SageMaker's and Vertex AI's routes. Fields a body holds that its schema does not know are left out, not refused, and named in x-ignored-fields. Model ids hold a slash: send it as is or as %2F. KServe v2 and TEI are also served over gRPC (GRPC_PORT, 8001: Triton's GRPCInferenceService, TEI's tei.v1, gRPC health and reflection); its .proto files are in packages/contract/proto of the repository (docs/api/grpc.md).",
    },
    tags: parts.map((part) => ({ name: part.tag })),
    paths,
    components: {
      parameters: Object.assign({}, PARAMETERS, ...parts.map((part) => part.parameters ?? {})) as Json,
      headers: HEADERS,
      ...(options.keys
        ? {
            securitySchemes: {
              bearer: { type: 'http', scheme: 'bearer', description: 'Authorization: Bearer <key>' },
              apiKey: { type: 'apiKey', in: 'header', name: 'x-api-key' },
            },
          }
        : {}),
    },
  };
}

const require = createRequire(import.meta.url);
const swaggerUi = path.dirname(require.resolve('swagger-ui-dist/package.json'));

// Relative URLs, so that the page works behind a proxy that serves the gateway under a prefix.
const DOCS_PAGE = `<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>tserve API</title><link rel="stylesheet" href="docs/swagger-ui.css"></head>
<body><div id="swagger-ui"></div><script src="docs/swagger-ui-bundle.js"></script><script src="docs/init.js"></script></body>
</html>
`;
// No online validator (validator.swagger.io): the page must work, and tell nothing, on a private network.
const DOCS_INIT = `window.ui = SwaggerUIBundle({ url: 'openapi.json', dom_id: '#swagger-ui', validatorUrl: null });\n`;

/** `GET /openapi.json`, and `GET /docs`: Swagger UI, its assets served from the swagger-ui-dist package. */
export function openApiRoutes(
  router: IRouter,
  config: Pick<GatewayConfig, 'API_KEYS' | 'API_KEYS_FILE' | 'ROOT_PATH'>,
): void {
  const described = openApiDocument({ keys: Boolean(config.API_KEYS_FILE) || Boolean(config.API_KEYS) });
  // Every path is under ROOT_PATH where it is set: a client generated from the document says so.
  const document = JSON.stringify(
    config.ROOT_PATH ? { ...described, servers: [{ url: config.ROOT_PATH }] } : described,
  );
  router.get('/openapi.json', (_req, res) => {
    res.type('application/json').send(document);
  });
  router.get('/docs', (req, res) => {
    // The page's addresses are relative to /docs: /docs/ would find them a level too deep.
    if (req.path.endsWith('/')) return res.redirect(301, '../docs');
    res.type('html').send(DOCS_PAGE);
  });
  router.get('/docs/init.js', (_req, res) => {
    res.type('text/javascript').send(DOCS_INIT);
  });
  router.use('/docs', express.static(swaggerUi, { index: false, fallthrough: true }));
}
