import { answer, jsonContent, modelCall, tag, type OpenApiOptions, type OpenApiPart } from '../http/openapi-parts.js';
import { cohereSchemas } from './cohere.js';

const TAG = 'Cohere';

/** Cohere's rerank routes in the OpenAPI document. */
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
  return { tag: TAG, paths: { '/v1/rerank': rerank('1'), '/v2/rerank': rerank('2') } };
}
