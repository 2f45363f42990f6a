import type { IRouter } from 'express';
import { z } from 'zod';
import { errorHandler, type ErrorFormat } from '../http/http-errors.js';
import { answerHeaders, httpEnvelope, inferenceRequest, type ProtocolParts } from '../serving/envelope.js';
import { jsonBody } from '../http/request-body.js';
import { readLenient } from '../http/ignored-fields.js';
import { requestIdOf } from '../http/request-id.js';
import { checkKind, CLASSIFIER, ModelChoice } from '../serving/model-choice.js';

/**
 * Infinity's classification route, `POST /classify`, for its clients and the frameworks' Infinity
 * integrations. Infinity's embeddings (`/embeddings`, `/models`) are OpenAI's routes without `/v1`
 * (openai.ts), and its rerank body, with `documents`, is answered by `/rerank` (tei.ts).
 */

const text = z.string({ error: 'each input must be a string' }).min(1, 'input must not contain empty strings');
const classifyRequest = z
  .object({
    input: z.union([text, z.array(text).min(1, 'input must not be an empty list')], {
      error: (issue) =>
        issue.input === undefined ? 'input is required' : 'input must be a string or a list of strings',
    }),
    model: z.string().min(1).optional().meta({ description: 'the served classifier; optional when one is served' }),
    raw_scores: z.boolean().default(false),
  })
  .strict();

const labelScore = z.strictObject({ score: z.number(), label: z.string() });
const classifyResponse = z.strictObject({
  object: z.literal('classify'),
  data: z.array(z.array(labelScore)).meta({ description: "for each input, every label's score, highest first" }),
  model: z.string(),
  usage: z.strictObject({ prompt_tokens: z.number().int(), total_tokens: z.number().int() }),
  id: z.string(),
  created: z.number().int(),
});
const errorBody = z.strictObject({
  error: z.strictObject({ message: z.string(), type: z.null(), param: z.null(), code: z.number().int() }),
});

/** The shapes of this protocol's bodies, for the OpenAPI document. */
export const infinitySchemas = { classifyRequest, classifyResponse, error: errorBody };

/** Infinity's error body: OpenAI's shape, its `code` the status. */
const infinityErrors: ErrorFormat = (error) => ({
  status: error.status,
  body: { error: { message: error.message, type: null, param: null, code: error.status } } satisfies z.infer<
    typeof errorBody
  >,
});

export function infinityRoutes(router: IRouter, parts: ProtocolParts): void {
  const choice = new ModelChoice(parts.registry);
  router.post(
    '/classify',
    parts.admission.beforeBody((req) => choice.pickBeforeBody(req.get('x-model'), CLASSIFIER)),
    jsonBody(parts.config),
    async (req, res) => {
      const body = readLenient(classifyRequest, req, res);
      const envelope = httpEnvelope(req, res, parts.config.REQUEST_TIMEOUT_MS);
      const model = choice.pick(req.get('x-model'), CLASSIFIER, body.model);
      // Every label, best first, scored as the transformers pipeline scores them (Infinity runs it).
      const request = inferenceRequest(envelope, {
        model,
        task: 'text-classification',
        inputs: typeof body.input === 'string' ? [body.input] : body.input,
        parameters: { top_k: null, ...(body.raw_scores ? { function_to_apply: 'none' } : {}) },
      });
      const classifier = checkKind(await parts.service.modelFor(request), CLASSIFIER);
      const result = await parts.service.infer(request, classifier);
      answerHeaders(res, envelope, result);
      const data = (result.outputs as Array<Array<{ label: string; score: number }>>).map((scores) =>
        scores.map(({ label, score }) => ({ score, label })),
      );
      res.json({
        object: 'classify',
        data,
        model,
        usage: { prompt_tokens: result.tokens, total_tokens: result.tokens },
        id: requestIdOf(res),
        created: Math.floor(Date.now() / 1000),
      } satisfies z.infer<typeof classifyResponse>);
    },
  );
  router.use('/classify', errorHandler(parts.logger, infinityErrors));
}
