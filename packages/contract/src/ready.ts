import { z } from 'zod';
import { TASKS } from './schemas.js';

/**
 * The bodies of the health routes, as zod schemas: the gateway types its answers with them and the
 * OpenAPI document (apps/gateway/src/ops/openapi.ts) describes them from them.
 */

const d = (description: string) => ({ description });

/** A model download in `GET /ready`. */
const readyDownloadSchema = z.strictObject({
  file: z.string(),
  percent: z.number(),
  bytes: z.number(),
  total_bytes: z.number(),
  bytes_per_second: z.number(),
});

/** One model in `GET /ready`: what its fields say depends on where the model stands. */
const readyModelSchema = z.strictObject({
  task: z.enum(TASKS).optional().meta(d("served, or served earlier: the model's own task")),
  workers: z.number().int().min(0).meta(d('live workers; 0 for a model loading, failed or lost')),
  queue_depth: z
    .number()
    .int()
    .optional()
    .meta(d('served or scaled to zero: requests accepted and not yet answered, over all gateways')),
  held: z
    .number()
    .int()
    .optional()
    .meta(d('served: of those, the requests this gateway holds, not yet sent to the queue')),
  devices: z.array(z.string()).optional().meta(d("served: its workers' device/dtype, each once")),
  warning: z
    .string()
    .optional()
    .meta(d('served by a dtype whose answers shift with batch mates (q8): says so, and what to do')),
  error: z
    .string()
    .optional()
    .meta(d('failed, or served only by workers of another wire protocol: why no worker serves it')),
  loading: z.literal(true).optional(),
  scaled_to_zero: z
    .literal(true)
    .optional()
    .meta(
      d(
        'configured (MODELS) with no worker at all: a request wakes one; estimated_time is its last measured load time',
      ),
    ),
  estimated_time: z.number().optional().meta(d('loading: seconds until its first worker is likely ready')),
  download: readyDownloadSchema.optional().meta(d('loading: the download of its furthest-along worker')),
  revision: z.string().optional().meta(d('served: the hub revision (commit id) its workers loaded, where they agree')),
  weights_sha256: z
    .string()
    .optional()
    .meta(d('served: the sha256 of the weights file its workers loaded, where they agree')),
  weights_file: z
    .string()
    .optional()
    .meta(
      d(
        'served: what its workers run, where they agree: the weights file, or the file an int8-row file was written from and the rewrite (onnx/model.onnx+int8-row-v2)',
      ),
    ),
});
export type ReadyModel = z.infer<typeof readyModelSchema>;

/** The body of `GET /ready` (200 when ready, 503 when not; `reasons` says what is missing). */
export const readyBodySchema = z.strictObject({
  status: z.enum(['ready', 'unavailable']),
  reasons: z.array(z.string()),
  breaker: z.enum(['closed', 'open', 'half-open']),
  models: z.record(z.string(), readyModelSchema),
});
export type ReadyBody = z.infer<typeof readyBodySchema>;

/** The body of `GET /backlog?model=<id>`: what the autoscaler scales a model's workers on. */
export const backlogBodySchema = z.strictObject({
  model: z.string(),
  backlog: z
    .number()
    .int()
    .min(0)
    .meta(
      d(
        "requests for the model accepted and not yet answered, over all gateways, and its batches' lines not yet answered",
      ),
    ),
});
export type BacklogBody = z.infer<typeof backlogBodySchema>;

/** The body of `GET /health`: the process answers. */
export const healthBodySchema = z.strictObject({ status: z.literal('ok') });
