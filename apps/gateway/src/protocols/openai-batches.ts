import type { IRouter } from 'express';
import { z } from 'zod';
import type { Logger } from 'pino';
import type { GatewayConfig } from '@tserve/config';
import { ApiError, describeIssues, parseLenient } from '@tserve/contract';
import { errorHandler } from '../http/http-errors.js';
import { jsonBody } from '../http/request-body.js';
import { noteIgnored } from '../http/ignored-fields.js';
import type { Admission } from '../admission/admission.js';
import type { FileStore } from '../offline/files.js';
import type { BatchStore } from '../offline/batches.js';
import { nowS } from '../offline/batch-object.js';
import { ENDPOINTS_ALLOWED, endpointAllowed, windowSeconds } from '../offline/batch-lines.js';
import { listBody, offlineErrors, owner, pageQuery } from './openai-files.js';

/**
 * OpenAI's Batch API: `POST /v1/batches`, `GET /v1/batches`, `GET /v1/batches/{id}`,
 * `POST /v1/batches/{id}/cancel`. A batch's lines run on the queue in the bulk class, each
 * answered as its route answers it alone (offline/batch-runner.ts).
 */

const batchRequest = z
  .object({
    input_file_id: z.string({ error: 'input_file_id is required' }).min(1),
    endpoint: z.string({ error: 'endpoint is required' }).refine(endpointAllowed, {
      error: `endpoint must be one of ${ENDPOINTS_ALLOWED}`,
    }),
    completion_window: z
      .string({ error: 'completion_window is required' })
      .refine((w) => windowSeconds(w) !== undefined, {
        error: 'completion_window must be a duration such as "24h" (also <n>m or <n>s)',
      }),
    metadata: z
      .record(z.string().max(64), z.string().max(512))
      .refine((m) => Object.keys(m).length <= 16, { error: 'metadata holds at most 16 pairs' })
      .nullable()
      .optional(),
  })
  .strict();

/** The shape of a batch's request, for the OpenAPI document. */
export const batchSchemas = { batchRequest };

export function openAiBatchRoutes(
  router: IRouter,
  parts: {
    config: GatewayConfig;
    files: FileStore;
    batches: BatchStore;
    admission: Admission;
    logger: Logger;
    /** Tells this gateway's runner that a batch waits. */
    started: () => void;
  },
): void {
  const { files, batches, admission, logger } = parts;
  const who = admission.identify();
  const notFound = (id: string) => new ApiError('not_found', `no batch ${id.slice(0, 100)}`);

  router.post('/v1/batches', who, jsonBody(parts.config), async (req, res) => {
    const parsed = parseLenient(batchRequest, req.body);
    if (!parsed.success) throw new ApiError('validation', describeIssues(parsed.error));
    noteIgnored(res, parsed.ignored);
    const { input_file_id, endpoint, completion_window, metadata } = parsed.data;
    const stored = await files.get(owner(res), input_file_id);
    if (!stored) throw new ApiError('not_found', `no file ${input_file_id.slice(0, 100)}`);
    if (stored.file.purpose !== 'batch')
      throw new ApiError('validation', `file ${input_file_id} is a batch's output, not a batch's input`);
    if (stored.lines === 0) throw new ApiError('validation', `file ${input_file_id} has no lines`);
    await files.checkRoom();
    const batch = await batches.create(owner(res), {
      input_file_id,
      endpoint,
      completion_window,
      metadata: metadata ?? null,
      expires_at: nowS() + (windowSeconds(completion_window) ?? 0),
      total: stored.lines,
    });
    parts.started();
    res.json(batch);
  });

  router.get('/v1/batches', who, async (req, res) => {
    res.json(listBody(await batches.list(owner(res), pageQuery(req))));
  });

  router.get('/v1/batches/:id', who, async (req, res) => {
    const id = String(req.params.id);
    const batch = await batches.get(owner(res), id);
    if (!batch) throw notFound(id);
    res.json(batch);
  });

  router.post('/v1/batches/:id/cancel', who, async (req, res) => {
    const id = String(req.params.id);
    const batch = await batches.cancel(owner(res), id);
    if (!batch) throw notFound(id);
    res.json(batch);
  });

  router.use('/v1/batches', errorHandler(logger, offlineErrors));
}
