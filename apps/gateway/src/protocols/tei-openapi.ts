import type { z } from 'zod';
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
import { teiSchemas } from './tei-schemas.js';

const TAG = 'TEI';

/** TEI's routes in the OpenAPI document. */
export function teiOpenApi(options: OpenApiOptions): OpenApiPart {
  const call = (operationId: string, summary: string, request: z.ZodType, response: z.ZodType) => ({
    post: modelCall(
      options,
      teiSchemas.error,
      {
        operationId,
        ...tag(TAG),
        summary,
        parameters: [ref('parameters', 'TeiModel')],
        requestBody: { required: true, content: jsonContent(request, 'input') },
        responses: { 200: answer('the answer', jsonContent(response, 'output')) },
      },
      [400, 413, 422, 424, 500, 503, 504],
    ),
  });
  const { embedRequest, embedResponse, predictRequest, predictResponse, rerankRequest, rerankResponse } = teiSchemas;
  return {
    tag: TAG,
    paths: {
      '/embed': call('teiEmbed', 'embeddings (an embedding model)', embedRequest, embedResponse),
      '/embed_sparse': call(
        'teiEmbedSparse',
        'sparse vectors (a masked-LM model with SPLADE pooling)',
        teiSchemas.embedSparseRequest,
        teiSchemas.embedSparseResponse,
      ),
      '/embed_all': call(
        'teiEmbedAll',
        "each token's vector, unpooled (an embedding model)",
        teiSchemas.embedAllRequest,
        teiSchemas.embedAllResponse,
      ),
      '/predict': call(
        'teiPredict',
        'classify texts or pairs (a sequence classifier)',
        predictRequest,
        predictResponse,
      ),
      '/rerank': call(
        'teiRerank',
        "rank texts against a query (a reranker): TEI's answer to texts, Infinity's, vLLM's and Jina's to documents",
        rerankRequest,
        rerankResponse,
      ),
      '/similarity': call(
        'teiSimilarity',
        "each sentence's cosine similarity to a source sentence (an embedding model)",
        teiSchemas.similarityRequest,
        teiSchemas.similarityResponse,
      ),
      '/tokenize': call(
        'teiTokenize',
        "tokenize texts with a model's tokenizer",
        teiSchemas.tokenizeRequest,
        teiSchemas.tokenizeResponse,
      ),
      '/decode': call(
        'teiDecode',
        "token ids back into text with a model's tokenizer",
        teiSchemas.decodeRequest,
        teiSchemas.decodeResponse,
      ),
      '/vertex': call(
        'teiVertex',
        "Vertex AI's prediction body: each instance a TEI body, each prediction its answer (also at AIP_PREDICT_ROUTE)",
        teiSchemas.vertexRequest,
        teiSchemas.vertexResponse,
      ),
      '/info': getOperation(
        TAG,
        'teiInfo',
        'a served model, as TEI describes itself',
        { 200: ok("the model's description", teiSchemas.info), ...errors(teiSchemas.error, [404, 422, 503]) },
        [
          { name: 'model', in: 'query', description: 'the model, when several are served', schema: { type: 'string' } },
          ref('parameters', 'TeiModel'),
        ],
      ),
    },
    parameters: {
      TeiModel: {
        name: 'x-model',
        in: 'header',
        description: 'the model, when several served models fit the route',
        schema: { type: 'string' },
      },
    },
  };
}
