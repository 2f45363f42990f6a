import { z } from 'zod';

/**
 * The pieces each protocol describes its routes with in the OpenAPI 3.1 document (ops/openapi.ts
 * assembles it): built from the zod schemas the routes validate requests with and type their
 * answers with, so that no shape is written twice.
 */

export type Json = Record<string, unknown>;

/** One protocol's share of the document: its tag, its paths, and the parameters only it uses. */
export interface OpenApiPart {
  tag: string;
  paths: Record<string, Json>;
  parameters?: Record<string, Json>;
}

export interface OpenApiOptions {
  /** API keys are on: model calls need a key, and may be refused 401, 403 and 429. */
  keys: boolean;
}

/** A zod schema as JSON Schema 2020-12 (OpenAPI 3.1's dialect): what a client sends, or what it gets. */
function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Json {
  // Transforms (TEI's "Left" → "left") have no JSON Schema; in input mode the side before them is described.
  const json = z.toJSONSchema(schema, { target: 'draft-2020-12', io }) as Json;
  // The document names its dialect once (OpenAPI 3.1's default is 2020-12), not in every schema.
  delete json.$schema;
  // A body may hold fields its schema does not know: they are left out, not refused (x-ignored-fields).
  if (io === 'input') allowOtherFields(json);
  return json;
}

/** Drops `additionalProperties: false` throughout a request's schema, which the routes' strict zod schemas write. */
function allowOtherFields(node: unknown): void {
  if (typeof node !== 'object' || node === null) return;
  if (Array.isArray(node)) {
    node.forEach(allowOtherFields);
    return;
  }
  const record = node as Json;
  if (record.additionalProperties === false) delete record.additionalProperties;
  Object.values(record).forEach(allowOtherFields);
}

export const jsonContent = (schema: z.ZodType, io: 'input' | 'output') => ({
  'application/json': { schema: jsonSchema(schema, io) },
});
export const ref = (kind: 'parameters' | 'headers' | 'responses', name: string) => ({
  $ref: `#/components/${kind}/${name}`,
});
export const tag = (name: string) => ({ tags: [name] });

const STATUS_TEXT: Record<number, string> = {
  400: 'invalid request: the message says what to fix',
  401: 'no valid API key',
  403: 'the API key may not call this model',
  404: 'no such model, file or batch (or route)',
  413: 'the body, or the number of inputs, is over the limit',
  415: 'the body is not JSON',
  422: 'the model could not run the input',
  424: 'the model could not run the input',
  429: 'over the API key quota, or overloaded',
  500: 'internal error',
  503: 'overloaded, or no worker serves the model now: retry after Retry-After',
  504: 'the deadline passed before the answer came',
  507: "the store of batches' files is full (FILES_STORE_MAX_MB)",
};

/** The error answers of `statuses`, each with the protocol's error body. */
export function errors(body: z.ZodType, statuses: number[]): Record<string, Json> {
  return Object.fromEntries(
    statuses.map((status) => [
      String(status),
      {
        description: STATUS_TEXT[status],
        headers: {
          'x-request-id': ref('headers', 'RequestId'),
          ...([429, 503].includes(status) ? { 'Retry-After': ref('headers', 'RetryAfter') } : {}),
        },
        content: jsonContent(body, 'output'),
      },
    ]),
  );
}

/** A model call's answer: its body and the timing headers every model call sets. */
export function answer(description: string, content: Json): Json {
  const headers = {
    'x-request-id': 'RequestId',
    'x-queue-time': 'QueueTime',
    'x-inference-time': 'InferenceTime',
    'x-batch-size': 'BatchSize',
    'x-total-time': 'TotalTime',
    'x-cache': 'Cache',
    'x-warnings': 'Warnings',
    'x-model-sha256': 'ModelSha256',
    'x-model-revision': 'ModelRevision',
    'x-ignored-fields': 'IgnoredFields',
  };
  return {
    description,
    headers: Object.fromEntries(Object.entries(headers).map(([name, component]) => [name, ref('headers', component)])),
    content,
  };
}

/** A route that reads (GET) and runs no model: its name, its tag, what it answers. */
export function getOperation(
  tagName: string,
  operationId: string,
  summary: string,
  responses: Json,
  parameters?: Json[],
): { get: Json } {
  return { get: { operationId, ...tag(tagName), summary, ...(parameters ? { parameters } : {}), responses } };
}

export function ok(description: string, schema: z.ZodType): Json {
  return {
    description,
    headers: { 'x-request-id': ref('headers', 'RequestId') },
    content: jsonContent(schema, 'output'),
  };
}

/**
 * A route that runs a model: admitted (keys, quotas, shedding), with the headers every model call
 * reads, and its errors in the protocol's body.
 */
export function modelCall(
  { keys }: OpenApiOptions,
  errorBody: z.ZodType,
  operation: Json & { parameters?: Json[]; responses: Json },
  statuses: number[],
): Json {
  return {
    ...operation,
    parameters: [
      ...(operation.parameters ?? []),
      ref('parameters', 'RequestTimeout'),
      ref('parameters', 'Priority'),
      ref('parameters', 'UseCache'),
      ref('parameters', 'TraceParent'),
    ],
    ...(keys ? { security: [{ bearer: [] }, { apiKey: [] }] } : {}),
    responses: {
      ...operation.responses,
      ...errors(
        errorBody,
        [...statuses, ...(keys ? [401, 403, 429] : [])].sort((a, b) => a - b),
      ),
    },
  };
}
