import { z } from 'zod';
import {
  errors,
  jsonContent,
  ok,
  tag,
  type Json,
  type OpenApiOptions,
  type OpenApiPart,
} from '../http/openapi-parts.js';
import { fileObjectSchema } from '../offline/files.js';
import { batchObjectSchema } from '../offline/batch-object.js';
import { openAiSchemas } from './openai.js';
import { batchSchemas } from './openai-batches.js';

const TAG = 'OpenAI Batch API';

const list = (item: z.ZodType) =>
  z.strictObject({
    object: z.literal('list'),
    data: z.array(item),
    first_id: z.string().nullable(),
    last_id: z.string().nullable(),
    has_more: z.boolean(),
  });
const deleted = z.strictObject({ id: z.string(), object: z.literal('file'), deleted: z.literal(true) });

const PARAMETERS: Record<string, Json> = {
  FileId: { name: 'file_id', in: 'path', required: true, schema: { type: 'string' } },
  BatchId: { name: 'batch_id', in: 'path', required: true, schema: { type: 'string' } },
  After: {
    name: 'after',
    in: 'query',
    description: 'the last id of the page before',
    schema: { type: 'string' },
  },
  Limit: { name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 10000, default: 20 } },
};
const param = (name: string) => ({ $ref: `#/components/parameters/${name}` });

/** One operation of this part: its id, summary, answers and the rest (parameters, body). */
type Operation = (operationId: string, summary: string, responses: Json, more?: Json) => Json;
/** The error answers of these statuses, and 401 where keys are on. */
type Refusals = (statuses: number[]) => Json;

/** The Files API's paths: a batch's input and output files. */
function filesPaths(operation: Operation, refusals: Refusals): Record<string, Json> {
  return {
    '/v1/files': {
      post: operation(
        'createFile',
        "uploads a batch's input: JSONL, one request a line",
        { 200: ok('the file', fileObjectSchema), ...refusals([400, 413, 507]) },
        {
          requestBody: {
            required: true,
            content: {
              'multipart/form-data': {
                schema: {
                  type: 'object',
                  required: ['file', 'purpose'],
                  properties: {
                    file: { type: 'string', format: 'binary' },
                    purpose: { type: 'string', enum: ['batch'] },
                  },
                },
              },
            },
          },
        },
      ),
      get: operation(
        'listFiles',
        "the caller's files, newest first",
        { 200: ok('the files', list(fileObjectSchema)), ...refusals([400]) },
        {
          parameters: [
            param('After'),
            param('Limit'),
            { name: 'order', in: 'query', schema: { type: 'string', enum: ['asc', 'desc'] } },
            { name: 'purpose', in: 'query', schema: { type: 'string' } },
          ],
        },
      ),
    },
    '/v1/files/{file_id}': {
      get: operation(
        'retrieveFile',
        'a file',
        { 200: ok('the file', fileObjectSchema), ...refusals([404]) },
        { parameters: [param('FileId')] },
      ),
      delete: operation(
        'deleteFile',
        'deletes a file',
        { 200: ok('deleted', deleted), ...refusals([404]) },
        { parameters: [param('FileId')] },
      ),
    },
    '/v1/files/{file_id}/content': {
      get: operation(
        'retrieveFileContent',
        "a file's lines",
        {
          200: {
            description: 'the lines, JSONL',
            content: { 'application/octet-stream': { schema: { type: 'string' } } },
          },
          ...refusals([404]),
        },
        { parameters: [param('FileId')] },
      ),
    },
  };
}

/** The Batches API's paths. */
function batchesPaths(operation: Operation, refusals: Refusals): Record<string, Json> {
  return {
    '/v1/batches': {
      post: operation(
        'createBatch',
        "runs a file's lines on the queue, in the batch class",
        { 200: ok('the batch', batchObjectSchema), ...refusals([400, 404, 507]) },
        { requestBody: { required: true, content: jsonContent(batchSchemas.batchRequest, 'input') } },
      ),
      get: operation(
        'listBatches',
        "the caller's batches, newest first",
        { 200: ok('the batches', list(batchObjectSchema)), ...refusals([400]) },
        { parameters: [param('After'), param('Limit')] },
      ),
    },
    '/v1/batches/{batch_id}': {
      get: operation(
        'retrieveBatch',
        'a batch, its status and counts',
        { 200: ok('the batch', batchObjectSchema), ...refusals([404]) },
        { parameters: [param('BatchId')] },
      ),
    },
    '/v1/batches/{batch_id}/cancel': {
      post: operation(
        'cancelBatch',
        'stops the lines not yet run; the batch ends cancelled, with the answers it has',
        { 200: ok('the batch, cancelling', batchObjectSchema), ...refusals([404]) },
        { parameters: [param('BatchId')] },
      ),
    },
  };
}

/** OpenAI's Files and Batches routes in the OpenAPI document. */
export function openAiBatchesOpenApi({ keys }: OpenApiOptions): OpenApiPart {
  const refusals: Refusals = (statuses) =>
    errors(
      openAiSchemas.error,
      [...statuses, ...(keys ? [401] : [])].sort((a, b) => a - b),
    );
  const operation: Operation = (operationId, summary, responses, more = {}) => ({
    operationId,
    ...tag(TAG),
    summary,
    ...more,
    ...(keys ? { security: [{ bearer: [] }, { apiKey: [] }] } : {}),
    responses,
  });
  return {
    tag: TAG,
    parameters: PARAMETERS,
    paths: { ...filesPaths(operation, refusals), ...batchesPaths(operation, refusals) },
  };
}
