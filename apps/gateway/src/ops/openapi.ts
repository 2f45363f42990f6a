import { createRequire } from 'node:module';
import path from 'node:path';
import express, { type IRouter } from 'express';
import { z } from 'zod';
import {
  backlogBodySchema,
  errorBodySchema,
  healthBodySchema,
  optionsSchema,
  parameterSchemas,
  PRIORITIES,
  readyBodySchema,
  taskInputSchemas,
  taskOutputSchemas,
  TASKS,
  type Task,
} from '@tserve/contract';
import type { GatewayConfig } from '@tserve/config';
import { openAiSchemas } from '../protocols/openai.js';
import { teiSchemas } from '../protocols/tei.js';
import { kserveSchemas } from '../protocols/kserve.js';
import { tritonSchemas } from '../protocols/kserve-triton.js';

/**
 * The OpenAPI 3.1 description of every route, built from the zod schemas the routes validate
 * requests with and type their answers with: no shape is written twice. Served at /openapi.json,
 * and read by a Swagger UI page at /docs whose assets come from the swagger-ui-dist package.
 */

type Json = Record<string, unknown>;

/** A zod schema as JSON Schema 2020-12 (OpenAPI 3.1's dialect): what a client sends, or what it gets. */
function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Json {
  // Transforms (TEI's "Left" → "left") have no JSON Schema; in input mode the side before them is described.
  const json = z.toJSONSchema(schema, { target: 'draft-2020-12', io }) as Json;
  // The document names its dialect once (OpenAPI 3.1's default is 2020-12), not in every schema.
  delete json.$schema;
  return json;
}

const jsonContent = (schema: z.ZodType, io: 'input' | 'output') => ({
  'application/json': { schema: jsonSchema(schema, io) },
});
const ref = (kind: 'parameters' | 'headers' | 'responses', name: string) => ({ $ref: `#/components/${kind}/${name}` });

/** Each protocol's error body; the native one is `{"error", "error_type"}`. */
const ERROR_BODIES = {
  native: errorBodySchema,
  openai: openAiSchemas.error,
  tei: teiSchemas.error,
  kserve: kserveSchemas.error,
} satisfies Record<string, z.ZodType>;
type Protocol = keyof typeof ERROR_BODIES;

const STATUS_TEXT: Record<number, string> = {
  400: 'invalid request: the message says what to fix',
  401: 'no valid API key',
  403: 'the API key may not call this model',
  404: 'no such model (or route)',
  413: 'the body, or the number of inputs, is over the limit',
  415: 'the body is not JSON',
  422: 'the model could not run the input',
  424: 'the model could not run the input',
  429: 'over the API key quota, or overloaded',
  500: 'internal error',
  503: 'overloaded, or no worker serves the model now: retry after Retry-After',
  504: 'the deadline passed before the answer came',
};

function errors(protocol: Protocol, statuses: number[]): Record<string, Json> {
  return Object.fromEntries(
    statuses.map((status) => [
      String(status),
      {
        description: STATUS_TEXT[status],
        headers: {
          'x-request-id': ref('headers', 'RequestId'),
          ...([429, 503].includes(status) ? { 'Retry-After': ref('headers', 'RetryAfter') } : {}),
        },
        content: jsonContent(ERROR_BODIES[protocol], 'output'),
      },
    ]),
  );
}

/** A model call's answer: its body and the timing headers every model call sets. */
function answer(description: string, content: Json): Json {
  const headers = {
    'x-request-id': 'RequestId',
    'x-queue-time': 'QueueTime',
    'x-inference-time': 'InferenceTime',
    'x-batch-size': 'BatchSize',
    'x-total-time': 'TotalTime',
    'x-cache': 'Cache',
    'x-warnings': 'Warnings',
    'x-model-sha256': 'ModelSha256',
    'x-model-revision': 'ModelRevision',
  };
  return {
    description,
    headers: Object.fromEntries(Object.entries(headers).map(([name, component]) => [name, ref('headers', component)])),
    content,
  };
}

function ok(description: string, schema: z.ZodType): Json {
  return {
    description,
    headers: { 'x-request-id': ref('headers', 'RequestId') },
    content: jsonContent(schema, 'output'),
  };
}

/** The Inference API body for one task: its inputs and parameters, as the request path checks them. */
function taskRequest(task: Task): z.ZodType {
  const parameters = parameterSchemas[task];
  return z
    .strictObject({
      inputs: taskInputSchemas[task],
      // Candidate labels are required, so a zero-shot body needs its parameters.
      parameters: task === 'zero-shot-classification' ? parameters : parameters.optional(),
      options: optionsSchema.optional(),
    })
    .meta({ title: task });
}

const inferenceRequest = z
  .union(TASKS.map(taskRequest))
  .meta({ description: "one of the tasks' bodies: the model's task decides which" });
/** One output for a single input, or a list of them for a list of inputs; which task's is the model's. */
const inferenceAnswer = z
  .union(
    TASKS.map((task) => z.union([taskOutputSchemas[task], z.array(taskOutputSchemas[task])]).meta({ title: task })),
  )
  .meta({ description: "one output per input (the list for a list of inputs), in the model's task's shape" });

const PATH_PARAMETERS = {
  Model: {
    name: 'model',
    in: 'path',
    required: true,
    description: 'the model id; it may hold a slash (replica/x), sent as is or as %2F',
    schema: { type: 'string' },
  },
  Task: {
    name: 'task',
    in: 'path',
    required: true,
    description: 'the task to run the model for',
    schema: { type: 'string', enum: [...TASKS] },
  },
  Version: {
    name: 'version',
    in: 'path',
    required: true,
    description: 'the model version: only "1" is served',
    schema: { type: 'string' },
  },
};

const HEADER_PARAMETERS = {
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
  WaitForModel: {
    name: 'x-wait-for-model',
    in: 'header',
    description: 'wait for a model that is still loading, until the deadline, instead of a 503',
    schema: { type: 'string', enum: ['true', 'false', '1', '0'] },
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
  TeiModel: {
    name: 'x-model',
    in: 'header',
    description: 'the model, when several served models fit the route',
    schema: { type: 'string' },
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
  ModelRevision: { description: 'the hub commit those weights came from', schema: { type: 'string' } },
};

/** The name a generated client gives each call (its method name in Go, Java, TypeScript clients). */
const OPERATION_IDS: Record<string, string> = {
  'POST /': 'runDefaultModel',
  'POST /models/{model}': 'runModel',
  'POST /models/{model}/pipeline/{task}': 'runModelForTask',
  'POST /v1/embeddings': 'createEmbeddings',
  'GET /v1/models': 'listModels',
  'GET /v1/models/{model}': 'getModel',
  'POST /embed': 'teiEmbed',
  'POST /predict': 'teiPredict',
  'POST /rerank': 'teiRerank',
  'POST /tokenize': 'teiTokenize',
  'GET /info': 'teiInfo',
  'GET /v2': 'serverMetadata',
  'GET /v2/health/live': 'serverLive',
  'GET /v2/health/ready': 'serverReady',
  'GET /v2/models/stats': 'allModelStatistics',
  'GET /health': 'health',
  'GET /ready': 'ready',
  'GET /backlog': 'backlog',
  'GET /metrics': 'metrics',
  'GET /openapi.json': 'openApiDocument',
  'GET /docs': 'docsPage',
};

/** The KServe model routes' names: `modelInfer`, `modelInferVersion`, … */
const KSERVE_ACTIONS: Record<string, string> = {
  '': 'modelMetadata',
  ready: 'modelReady',
  infer: 'modelInfer',
  config: 'modelConfig',
  stats: 'modelStatistics',
};

function operationIdOf(method: string, template: string): string | undefined {
  const kserve = /^\/v2\/models\/\{model\}(\/versions\/\{version\})?(?:\/(\w+))?$/.exec(template);
  if (kserve) return `${KSERVE_ACTIONS[kserve[2] ?? '']}${kserve[1] ? 'Version' : ''}`;
  return OPERATION_IDS[`${method.toUpperCase()} ${template}`];
}

interface OpenApiOptions {
  /** API keys are on: model calls need a key, and may be refused 401, 403 and 429. */
  keys: boolean;
}

/** The OpenAPI 3.1 document of the gateway's routes. */
function openApiDocument({ keys }: OpenApiOptions): Json {
  /** A route that runs a model: admitted (keys, quotas, shedding), with the headers every model call reads. */
  const modelCall = (
    protocol: Protocol,
    operation: Json & { parameters?: Json[]; responses: Json },
    statuses: number[],
  ): Json => ({
    ...operation,
    parameters: [
      ...(operation.parameters ?? []),
      ref('parameters', 'RequestTimeout'),
      ref('parameters', 'Priority'),
      ref('parameters', 'UseCache'),
      ref('parameters', 'TraceParent'),
    ],
    ...(keys ? { security: [{ bearer: [] }, { apiKey: [] }] } : {}),
    responses: {
      ...operation.responses,
      ...errors(
        protocol,
        [...statuses, ...(keys ? [401, 403, 429] : [])].sort((a, b) => a - b),
      ),
    },
  });
  const tag = (name: string) => ({ tags: [name] });

  const inferenceApi = (summary: string, extra: Json[]) =>
    modelCall(
      'native',
      {
        ...tag('Inference API'),
        summary,
        parameters: [...extra, ref('parameters', 'WaitForModel')],
        requestBody: { required: true, content: jsonContent(inferenceRequest, 'input') },
        responses: { 200: answer("the model's outputs", jsonContent(inferenceAnswer, 'output')) },
      },
      [400, 404, 413, 415, 422, 500, 503, 504],
    );

  const tei = (summary: string, request: z.ZodType, response: z.ZodType) =>
    modelCall(
      'tei',
      {
        ...tag('TEI'),
        summary,
        parameters: [ref('parameters', 'TeiModel')],
        requestBody: { required: true, content: jsonContent(request, 'input') },
        responses: { 200: answer('the answer', jsonContent(response, 'output')) },
      },
      [400, 413, 422, 424, 500, 503, 504],
    );

  const kserveModel = (action: '' | '/ready' | '/infer' | '/config' | '/stats', versioned: boolean): Json => {
    const parameters = [ref('parameters', 'Model'), ...(versioned ? [ref('parameters', 'Version')] : [])];
    if (action === '/infer')
      return {
        post: modelCall(
          'kserve',
          {
            ...tag('KServe v2'),
            summary: 'run a classifier or an embedding model on a BYTES tensor of texts',
            parameters,
            requestBody: {
              required: true,
              content: {
                ...jsonContent(kserveSchemas.inferRequest, 'input'),
                'application/octet-stream': {
                  schema: {
                    type: 'string',
                    contentMediaType: 'application/octet-stream',
                    description:
                      "Triton's binary tensor data: a JSON header of Inference-Header-Content-Length bytes, then the tensors' bytes",
                  },
                },
              },
            },
            responses: {
              200: answer('the output tensors', {
                ...jsonContent(kserveSchemas.inferResponse, 'output'),
                'application/octet-stream': {
                  schema: { type: 'string', contentMediaType: 'application/octet-stream' },
                },
              }),
            },
          },
          [400, 404, 413, 422, 500, 503, 504],
        ),
      };
    if (action === '/config')
      return {
        get: {
          ...tag('KServe v2'),
          summary: "the model's configuration, as Triton's model configuration extension gives it",
          parameters,
          responses: { 200: ok('the configuration', tritonSchemas.modelConfig), ...errors('kserve', [404]) },
        },
      };
    if (action === '/stats')
      return {
        get: {
          ...tag('KServe v2'),
          summary: "the model's statistics, as Triton's statistics extension gives them, summed over its live workers",
          parameters,
          responses: { 200: ok('the statistics', tritonSchemas.statistics), ...errors('kserve', [404]) },
        },
      };
    if (action === '/ready')
      return {
        get: {
          ...tag('KServe v2'),
          summary: 'whether a worker serves the model',
          parameters,
          responses: {
            200: ok('served', kserveSchemas.modelReady),
            503: ok('known, not served now', kserveSchemas.modelReady),
            ...errors('kserve', [404]),
          },
        },
      };
    return {
      get: {
        ...tag('KServe v2'),
        summary: "the model's metadata: its input and output tensors",
        parameters,
        responses: { 200: ok('the metadata', kserveSchemas.modelMetadata), ...errors('kserve', [400, 404]) },
      },
    };
  };

  const paths: Record<string, Json> = {
    '/': {
      post: modelCall(
        'native',
        {
          ...tag('Inference API'),
          summary: 'run the default model: the whole body is one text, or a JSON body of the Inference API',
          parameters: [ref('parameters', 'WaitForModel')],
          requestBody: {
            required: true,
            description: 'a body of any content type but JSON is read as one text (curl -d sends it as a form)',
            content: {
              'text/plain': { schema: { type: 'string', minLength: 1 } },
              ...jsonContent(inferenceRequest, 'input'),
            },
          },
          responses: { 200: answer("the model's outputs", jsonContent(inferenceAnswer, 'output')) },
        },
        [400, 413, 422, 500, 503, 504],
      ),
    },
    '/models/{model}': {
      post: inferenceApi('run a model (the Hugging Face Inference API)', [ref('parameters', 'Model')]),
    },
    '/models/{model}/pipeline/{task}': {
      post: inferenceApi(
        'run a model for a task it serves (an embedding model serves feature-extraction and sentence-similarity)',
        [ref('parameters', 'Model'), ref('parameters', 'Task')],
      ),
    },
    '/v1/embeddings': {
      post: modelCall(
        'openai',
        {
          ...tag('OpenAI'),
          summary: 'embeddings, as OpenAI answers them',
          requestBody: { required: true, content: jsonContent(openAiSchemas.embeddingsRequest, 'input') },
          responses: { 200: answer('the embeddings', jsonContent(openAiSchemas.embeddingsResponse, 'output')) },
        },
        [400, 404, 413, 422, 500, 503, 504],
      ),
    },
    '/v1/models': {
      get: {
        ...tag('OpenAI'),
        summary: 'the served models',
        responses: { 200: ok('the served models', openAiSchemas.modelList) },
      },
    },
    '/v1/models/{model}': {
      get: {
        ...tag('OpenAI'),
        summary: 'one served model',
        parameters: [ref('parameters', 'Model')],
        responses: { 200: ok('the model', openAiSchemas.model), ...errors('openai', [404]) },
      },
    },
    '/embed': { post: tei('embeddings (an embedding model)', teiSchemas.embedRequest, teiSchemas.embedResponse) },
    '/predict': {
      post: tei(
        'classify texts or pairs (a sequence classifier)',
        teiSchemas.predictRequest,
        teiSchemas.predictResponse,
      ),
    },
    '/rerank': {
      post: tei('rank texts against a query (a reranker)', teiSchemas.rerankRequest, teiSchemas.rerankResponse),
    },
    '/tokenize': {
      post: tei("tokenize texts with a model's tokenizer", teiSchemas.tokenizeRequest, teiSchemas.tokenizeResponse),
    },
    '/info': {
      get: {
        ...tag('TEI'),
        summary: 'a served model, as TEI describes itself',
        parameters: [
          { name: 'model', in: 'query', description: 'the model, when several are served', schema: { type: 'string' } },
          ref('parameters', 'TeiModel'),
        ],
        responses: { 200: ok("the model's description", teiSchemas.info), ...errors('tei', [404, 422, 503]) },
      },
    },
    '/v2': {
      get: {
        ...tag('KServe v2'),
        summary: 'server metadata',
        responses: { 200: ok('the server', kserveSchemas.serverMetadata) },
      },
    },
    '/v2/health/live': {
      get: { ...tag('KServe v2'), summary: 'the process answers', responses: { 200: ok('live', kserveSchemas.live) } },
    },
    '/v2/health/ready': {
      get: {
        ...tag('KServe v2'),
        summary: 'Redis answers and a worker serves a model',
        responses: { 200: ok('ready', kserveSchemas.ready), 503: ok('not ready', kserveSchemas.ready) },
      },
    },
    '/v2/models/stats': {
      get: {
        ...tag('KServe v2'),
        summary: "every served model's statistics, as Triton's statistics extension gives them",
        responses: { 200: ok('the statistics', tritonSchemas.statistics) },
      },
    },
    ...Object.fromEntries(
      (['', '/ready', '/infer', '/config', '/stats'] as const).flatMap((action) => [
        [`/v2/models/{model}${action}`, kserveModel(action, false)],
        [`/v2/models/{model}/versions/{version}${action}`, kserveModel(action, true)],
      ]),
    ),
    '/health': {
      get: { ...tag('Operations'), summary: 'the process answers', responses: { 200: ok('alive', healthBodySchema) } },
    },
    '/ready': {
      get: {
        ...tag('Operations'),
        summary: 'the gateway can serve: Redis answers, the breaker is closed, every model has a live worker',
        responses: {
          200: ok('ready', readyBodySchema),
          503: {
            ...ok('not ready: reasons says what is missing', readyBodySchema),
            headers: { 'Retry-After': ref('headers', 'RetryAfter') },
          },
        },
      },
    },
    '/backlog': {
      get: {
        ...tag('Operations'),
        summary: "a model's requests accepted and not yet answered, over all gateways (what the autoscaler reads)",
        parameters: [{ name: 'model', in: 'query', required: true, schema: { type: 'string', minLength: 1 } }],
        responses: { 200: ok('the backlog', backlogBodySchema), ...errors('native', [400]) },
      },
    },
    '/metrics': {
      get: {
        ...tag('Operations'),
        summary: 'Prometheus metrics',
        responses: {
          200: {
            description: 'the metrics, in the Prometheus text format',
            content: { 'text/plain': { schema: { type: 'string' } } },
          },
        },
      },
    },
    '/openapi.json': {
      get: {
        ...tag('Operations'),
        summary: 'this document',
        responses: { 200: { description: 'the OpenAPI document', content: { 'application/json': {} } } },
      },
    },
    '/docs': {
      get: {
        ...tag('Operations'),
        summary: 'this document, read in Swagger UI',
        responses: { 200: { description: 'the page', content: { 'text/html': {} } } },
      },
    },
  };

  for (const [template, item] of Object.entries(paths)) {
    for (const [method, operation] of Object.entries(item as Record<string, Json>)) {
      const operationId = operationIdOf(method, template);
      if (!operationId)
        throw new Error(`openapi.ts: no operationId for ${method.toUpperCase()} ${template}; add one to OPERATION_IDS`);
      // First, as generators list it: the name a generated client gives the call.
      item[method] = { operationId, ...operation };
    }
  }

  return {
    openapi: '3.1.0',
    info: {
      title: 'tserve',
      version: '0.1.0',
      description:
        'Transformer models behind the Hugging Face Inference API, OpenAI embeddings, TEI and KServe v2. Model ids hold a slash: send it as is or as %2F.',
    },
    tags: ['Inference API', 'OpenAI', 'TEI', 'KServe v2', 'Operations'].map((name) => ({ name })),
    paths,
    components: {
      parameters: { ...PATH_PARAMETERS, ...HEADER_PARAMETERS },
      headers: HEADERS,
      ...(keys
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
export function openApiRoutes(router: IRouter, config: Pick<GatewayConfig, 'API_KEYS' | 'API_KEYS_FILE'>): void {
  const document = JSON.stringify(openApiDocument({ keys: Boolean(config.API_KEYS_FILE) || Boolean(config.API_KEYS) }));
  router.get('/openapi.json', (_req, res) => {
    res.type('application/json').send(document);
  });
  router.get('/docs', (req, res) => {
    if (req.originalUrl.startsWith('/docs/')) return res.redirect(301, '../docs');
    res.type('html').send(DOCS_PAGE);
  });
  router.get('/docs/init.js', (_req, res) => {
    res.type('text/javascript').send(DOCS_INIT);
  });
  router.use('/docs', express.static(swaggerUi, { index: false, fallthrough: true }));
}
