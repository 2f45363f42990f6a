import type { z } from 'zod';
import {
  answer,
  errors,
  getOperation,
  jsonContent,
  modelCall,
  ok,
  tag,
  type OpenApiOptions,
  type OpenApiPart,
} from '../http/openapi-parts.js';
import { ollamaSchemas } from './ollama.js';

const TAG = 'Ollama';

/** Ollama's embedding routes, and the model list and version its clients ask first, in the OpenAPI document. */
export function ollamaOpenApi(options: OpenApiOptions): OpenApiPart {
  const call = (operationId: string, summary: string, request: z.ZodType, response: z.ZodType) => ({
    post: modelCall(
      options,
      ollamaSchemas.error,
      {
        operationId,
        ...tag(TAG),
        summary,
        requestBody: { required: true, content: jsonContent(request, 'input') },
        responses: { 200: answer('the vectors', jsonContent(response, 'output')) },
      },
      [400, 404, 413, 500, 503, 504],
    ),
  });
  return {
    tag: TAG,
    paths: {
      '/api/embed': call(
        'ollamaEmbed',
        "embeddings of texts, normalised, as Ollama's /api/embed answers (a model id or an alias)",
        ollamaSchemas.embedRequest,
        ollamaSchemas.embedResponse,
      ),
      '/api/embeddings': call(
        'ollamaEmbeddings',
        "the embedding of one text, as Ollama's older /api/embeddings answers",
        ollamaSchemas.embeddingsRequest,
        ollamaSchemas.embeddingsResponse,
      ),
      '/api/tags': getOperation(
        TAG,
        'ollamaTags',
        'the served embedding models and their aliases, as Ollama lists its models',
        {
          200: ok('the models', ollamaSchemas.tagsResponse),
        },
      ),
      '/api/version': getOperation(TAG, 'ollamaVersion', 'the Ollama release whose API these routes follow', {
        200: ok('the version', ollamaSchemas.versionResponse),
        ...errors(ollamaSchemas.error, []),
      }),
    },
  };
}
