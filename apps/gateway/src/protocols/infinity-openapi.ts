import { answer, jsonContent, modelCall, tag, type OpenApiOptions, type OpenApiPart } from '../http/openapi-parts.js';
import { infinitySchemas } from './infinity.js';

const TAG = 'Infinity';

/** Infinity's classification route in the OpenAPI document (its others are OpenAI's and TEI's). */
export function infinityOpenApi(options: OpenApiOptions): OpenApiPart {
  return {
    tag: TAG,
    paths: {
      '/classify': {
        post: modelCall(
          options,
          infinitySchemas.error,
          {
            operationId: 'infinityClassify',
            ...tag(TAG),
            summary: "every label's score for each text (a sequence classifier), as Infinity answers",
            requestBody: { required: true, content: jsonContent(infinitySchemas.classifyRequest, 'input') },
            responses: { 200: answer('the scores', jsonContent(infinitySchemas.classifyResponse, 'output')) },
          },
          [400, 404, 413, 500, 503, 504],
        ),
      },
    },
  };
}
