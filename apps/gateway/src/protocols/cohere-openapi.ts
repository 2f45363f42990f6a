import { answer, jsonContent, modelCall, tag, type OpenApiOptions, type OpenApiPart } from '../http/openapi-parts.js';
import { cohereSchemas } from './cohere.js';
import { cohereEmbedSchemas } from './cohere-embed.js';

const TAG = 'Cohere';

/** Cohere's rerank and embed routes in the OpenAPI document. */
export function cohereOpenApi(options: OpenApiOptions): OpenApiPart {
  const rerank = (version: string) => ({
    post: modelCall(
      options,
      cohereSchemas.error,
      {
        operationId: `cohereRerankV${version}`,
        ...tag(TAG),
        summary: `rank documents against a query, as Cohere's rerank v${version} answers${version === '1' ? ' (and Jina’s)' : ''}`,
        requestBody: { required: true, content: jsonContent(cohereSchemas.rerankRequest, 'input') },
        responses: { 200: answer('the ranked documents', jsonContent(cohereSchemas.rerankResponse, 'output')) },
      },
      [400, 404, 413, 500, 503, 504],
    ),
  });
  const embed = (version: string) => ({
    post: modelCall(
      options,
      cohereSchemas.error,
      {
        operationId: `cohereEmbedV${version}`,
        ...tag(TAG),
        summary: `embeddings of texts in the types asked for (float, int8, uint8, binary, ubinary, base64), as Cohere's embed v${version} answers`,
        requestBody: { required: true, content: jsonContent(cohereEmbedSchemas.embedRequest, 'input') },
        responses: {
          200: answer(
            version === '1' ? 'the vectors: by type, or (no embedding_types) a list of floats' : 'the vectors, by type',
            jsonContent(
              version === '1'
                ? cohereEmbedSchemas.embedResponse.or(cohereEmbedSchemas.floatsResponse)
                : cohereEmbedSchemas.embedResponse,
              'output',
            ),
          ),
        },
      },
      [400, 404, 413, 500, 503, 504],
    ),
  });
  return {
    tag: TAG,
    paths: {
      '/v1/rerank': rerank('1'),
      '/v2/rerank': rerank('2'),
      '/v1/embed': embed('1'),
      '/v2/embed': embed('2'),
    },
  };
}
