import {
  answer,
  errors,
  getOperation,
  jsonContent,
  modelCall,
  ok,
  ref,
  tag,
  type Json,
  type OpenApiOptions,
  type OpenApiPart,
} from '../http/openapi-parts.js';
import { kserveSchemas } from './kserve-schemas.js';
import { tritonSchemas } from './kserve-triton.js';

const TAG = 'KServe v2';

type Action = '' | '/ready' | '/infer' | '/config' | '/stats';

/** The model routes' names: `modelInfer`, `modelInferVersion`, … */
const OPERATIONS: Record<Action, string> = {
  '': 'modelMetadata',
  '/ready': 'modelReady',
  '/infer': 'modelInfer',
  '/config': 'modelConfig',
  '/stats': 'modelStatistics',
};

const get = (operationId: string, summary: string, responses: Json, parameters?: Json[]) =>
  getOperation(TAG, operationId, summary, responses, parameters);

/** `POST …/infer`: texts in a BYTES tensor, as JSON or as Triton's binary tensor data. */
function inferOperation(options: OpenApiOptions, operationId: string, parameters: Json[]): Json {
  const binary = { schema: { type: 'string', contentMediaType: 'application/octet-stream' } };
  return modelCall(
    options,
    kserveSchemas.error,
    {
      operationId,
      ...tag(TAG),
      summary: 'run a classifier or an embedding model on a BYTES tensor of texts',
      parameters,
      requestBody: {
        required: true,
        content: {
          ...jsonContent(kserveSchemas.inferRequest, 'input'),
          'application/octet-stream': {
            schema: {
              ...binary.schema,
              description:
                "Triton's binary tensor data: a JSON header of Inference-Header-Content-Length bytes, then the tensors' bytes",
            },
          },
        },
      },
      responses: {
        200: answer('the output tensors', {
          ...jsonContent(kserveSchemas.inferResponse, 'output'),
          'application/octet-stream': binary,
        }),
      },
    },
    [400, 404, 413, 422, 500, 503, 504],
  );
}

/** One model route, with or without its version. */
function modelRoute(options: OpenApiOptions, action: Action, versioned: boolean): Json {
  const parameters = [ref('parameters', 'Model'), ...(versioned ? [ref('parameters', 'Version')] : [])];
  const operationId = `${OPERATIONS[action]}${versioned ? 'Version' : ''}`;
  const notFound = errors(kserveSchemas.error, [404]);
  switch (action) {
    case '/infer':
      return { post: inferOperation(options, operationId, parameters) };
    case '/config':
      return get(
        operationId,
        "the model's configuration, as Triton's model configuration extension gives it",
        { 200: ok('the configuration', tritonSchemas.modelConfig), ...notFound },
        parameters,
      );
    case '/stats':
      return get(
        operationId,
        "the model's statistics, as Triton's statistics extension gives them, summed over its live workers",
        { 200: ok('the statistics', tritonSchemas.statistics), ...notFound },
        parameters,
      );
    case '/ready':
      return get(
        operationId,
        'whether a worker serves the model',
        {
          200: ok('served', kserveSchemas.modelReady),
          503: ok('known, not served now', kserveSchemas.modelReady),
          ...notFound,
        },
        parameters,
      );
    default:
      return get(
        operationId,
        "the model's metadata: its input and output tensors",
        { 200: ok('the metadata', kserveSchemas.modelMetadata), ...errors(kserveSchemas.error, [400, 404]) },
        parameters,
      );
  }
}

/** The KServe v2 routes, and Triton's extensions, in the OpenAPI document. */
export function kserveOpenApi(options: OpenApiOptions): OpenApiPart {
  return {
    tag: TAG,
    paths: {
      '/v2': get('serverMetadata', 'server metadata', { 200: ok('the server', kserveSchemas.serverMetadata) }),
      '/v2/health/live': get('serverLive', 'the process answers', { 200: ok('live', kserveSchemas.live) }),
      '/v2/health/ready': get('serverReady', 'Redis answers and a worker serves a model', {
        200: ok('ready', kserveSchemas.ready),
        503: ok('not ready', kserveSchemas.ready),
      }),
      '/v2/models/stats': get(
        'allModelStatistics',
        "every served model's statistics, as Triton's statistics extension gives them",
        { 200: ok('the statistics', tritonSchemas.statistics) },
      ),
      ...Object.fromEntries(
        (['', '/ready', '/infer', '/config', '/stats'] as const).flatMap((action) => [
          [`/v2/models/{model}${action}`, modelRoute(options, action, false)],
          [`/v2/models/{model}/versions/{version}${action}`, modelRoute(options, action, true)],
        ]),
      ),
    },
    parameters: {
      Version: {
        name: 'version',
        in: 'path',
        required: true,
        description: 'the model version: only "1" is served',
        schema: { type: 'string' },
      },
    },
  };
}
