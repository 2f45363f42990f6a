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
  const embeddings = (operationId: string, summary: string) => ({
    post: modelCall(
      options,
      openAiSchemas.error,
      {
        operationId,
        ...tag(TAG),
        summary,
        requestBody: { required: true, content: jsonContent(openAiSchemas.embeddingsRequest, 'input') },
        responses: { 200: answer('the embeddings', jsonContent(openAiSchemas.embeddingsResponse, 'output')) },
      },
      [400, 404, 413, 422, 500, 503, 504],
    ),
  });
  const models = (operationId: string, summary: string) =>
    getOperation(TAG, operationId, summary, { 200: ok('the served models', openAiSchemas.modelList) });
  const model = (operationId: string) =>
    getOperation(
      TAG,
      operationId,
      'one served model',
      { 200: ok('the model', openAiSchemas.model), ...errors(openAiSchemas.error, [404]) },
      [ref('parameters', 'Model')],
    );
  return {
    tag: TAG,
    paths: {
      '/v1/embeddings': embeddings('createEmbeddings', 'embeddings, as OpenAI answers them'),
      '/v1/models': models('listModels', 'the served models'),
      '/v1/models/{model}': model('getModel'),
      // Without /v1, as TEI and Infinity serve them, for clients given the bare address.
      '/embeddings': embeddings('createEmbeddingsUnversioned', 'embeddings, as OpenAI answers them (without /v1)'),
      '/models': models('listModelsUnversioned', 'the served models (without /v1)'),
      '/models/{model}': model('getModelUnversioned'),
    },
  };
}
