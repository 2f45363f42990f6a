import type { IRouter } from 'express';
import { z } from 'zod';
import { errorHandler, type ErrorFormat } from '../http/http-errors.js';
import { requestIdOf } from '../http/request-id.js';
import { readLenient } from '../http/ignored-fields.js';
import { answerHeaders, httpEnvelope, inferenceRequest, type ProtocolParts } from '../serving/envelope.js';
import { jsonBody } from '../http/request-body.js';
import { checkKind, ModelChoice, RERANKER } from '../serving/model-choice.js';
import { rankingCall, ranksOf } from '../serving/ranking.js';

/**
 * Cohere's rerank API (`POST /v2/rerank`, and `POST /v1/rerank`, whose shape Jina's API shares), so
 * that Cohere's clients and the frameworks' Cohere and Jina rerankers work pointed at the gateway.
 * It runs on any model TEI's `/rerank` serves, through the same code.
 */

const text = z
  .string({ error: 'must be a string or an object with a "text" string' })
  .min(1, 'must not be an empty string');
/** A document: a string, or an object whose `text` is ranked and whose other fields come back with it. */
const document = z.union([text, z.looseObject({ text })], {
  error: 'must be a string or an object with a "text" string',
});
const rerankRequest = z
  .object({
    model: z.string().min(1).optional().meta({ description: 'the served model; optional when one reranker is served' }),
    query: z.string({ error: 'must be a string' }).min(1, 'must not be empty'),
    documents: z
      .array(document, { error: 'must be a list' })
      .min(1, 'must not be empty')
      .meta({ description: 'strings, or objects with a "text" field' }),
    top_n: z
      .number({ error: 'must be a positive integer' })
      .int('must be a positive integer')
      .min(1, 'must be a positive integer')
      .optional(),
    return_documents: z.boolean().default(false),
    max_tokens_per_doc: z
      .number({ error: 'must be a positive integer' })
      .int('must be a positive integer')
      .min(1, 'must be a positive integer')
      .optional()
      .meta({ description: "each document's tokens kept; the pair is cut to the model's length in any case" }),
    priority: z
      .number()
      .int()
      .min(0)
      .optional()
      .meta({ description: "Cohere's priority, accepted and not used: send x-priority (or a key's class) here" }),
  })
  .strict();

const result = z.strictObject({
  index: z.number().int(),
  relevance_score: z.number(),
  document: z.looseObject({ text: z.string() }).optional(),
});
const rerankResponse = z.strictObject({
  id: z.string(),
  results: z.array(result).meta({ description: 'the documents by relevance, highest first' }),
  meta: z.strictObject({
    api_version: z.strictObject({ version: z.string() }),
    billed_units: z.strictObject({ search_units: z.number().int(), input_tokens: z.number().int() }),
  }),
});
const errorBody = z.strictObject({ message: z.string() });

/** The shapes of this protocol's bodies, for the OpenAPI document. */
export const cohereSchemas = { rerankRequest, rerankResponse, error: errorBody };

/** Cohere bills a search unit per query of up to a hundred documents. */
const DOCUMENTS_PER_SEARCH_UNIT = 100;

/** Cohere's error body: `{"message"}`, the status saying what kind of error it is; its embed routes answer it too. */
export const cohereErrors: ErrorFormat = (error) => ({
  status: error.status,
  body: { message: error.message } satisfies z.infer<typeof errorBody>,
});

export function cohereRoutes(router: IRouter, parts: ProtocolParts): void {
  const choice = new ModelChoice(parts.registry);
  const json = jsonBody(parts.config);
  for (const version of ['1', '2']) {
    const path = `/v${version}/rerank`;
    router.post(
      path,
      parts.admission.beforeBody((req) => choice.pickBeforeBody(req.get('x-model'), RERANKER)),
      json,
      async (req, res) => {
        const body = readLenient(rerankRequest, req, res);
        const envelope = httpEnvelope(req, res, parts.config.REQUEST_TIMEOUT_MS);
        const id = choice.pick(req.get('x-model'), RERANKER, body.model);
        const texts = body.documents.map((d) => (typeof d === 'string' ? d : d.text));
        // Cohere always cuts a document to fit, and scores in [0, 1].
        const call = rankingCall(id, body.query, texts, {
          truncate: true,
          rawScores: false,
          textMaxTokens: body.max_tokens_per_doc,
        });
        const request = inferenceRequest(envelope, call);
        const model = checkKind(await parts.service.modelFor(request), RERANKER);
        const result = await parts.service.infer(request, model);
        answerHeaders(res, envelope, result);
        const [ranks, tokens] = [ranksOf(result), result.tokens];
        res.json({
          id: requestIdOf(res),
          results: ranks.slice(0, body.top_n).map(({ index, score }) => {
            const d = body.documents[index];
            return {
              index,
              relevance_score: score,
              ...(body.return_documents ? { document: typeof d === 'string' ? { text: d } : d } : {}),
            };
          }),
          meta: {
            api_version: { version },
            billed_units: {
              search_units: Math.ceil(body.documents.length / DOCUMENTS_PER_SEARCH_UNIT),
              input_tokens: tokens,
            },
          },
        } satisfies z.infer<typeof rerankResponse>);
      },
    );
    router.use(path, errorHandler(parts.logger, cohereErrors));
  }
}
