import {
  answer,
  errors,
  jsonContent,
  modelCall,
  ok,
  ref,
  tag,
  type OpenApiOptions,
  type OpenApiPart,
} from '../http/openapi-parts.js';
import { openAiSchemas } from './openai.js';

const TAG = 'OpenAI';

/** OpenAI's routes in the OpenAPI document. */
export function openAiOpenApi(options: OpenApiOptions): OpenApiPart {
  return {
    tag: TAG,
    paths: {
      '/v1/embeddings': {
        post: modelCall(
          options,
          openAiSchemas.error,
          {
            operationId: 'createEmbeddings',
            ...tag(TAG),
            summary: 'embeddings, as OpenAI answers them',
            requestBody: { required: true, content: jsonContent(openAiSchemas.embeddingsRequest, 'input') },
            responses: { 200: answer('the embeddings', jsonContent(openAiSchemas.embeddingsResponse, 'output')) },
          },
          [400, 404, 413, 422, 500, 503, 504],
        ),
      },
      '/v1/models': {
        get: {
          operationId: 'listModels',
          ...tag(TAG),
          summary: 'the served models',
          responses: { 200: ok('the served models', openAiSchemas.modelList) },
        },
      },
      '/v1/models/{model}': {
        get: {
          operationId: 'getModel',
          ...tag(TAG),
          summary: 'one served model',
          parameters: [ref('parameters', 'Model')],
          responses: { 200: ok('the model', openAiSchemas.model), ...errors(openAiSchemas.error, [404]) },
        },
      },
    },
  };
}
