import {
  answer,
  errors,
  getOperation,
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
      '/v1/models': getOperation(TAG, 'listModels', 'the served models', {
        200: ok('the served models', openAiSchemas.modelList),
      }),
      '/v1/models/{model}': getOperation(
        TAG,
        'getModel',
        'one served model',
        { 200: ok('the model', openAiSchemas.model), ...errors(openAiSchemas.error, [404]) },
        [ref('parameters', 'Model')],
      ),
    },
  };
}
