import { z } from 'zod';

/** OpenAI's batch object: its statuses, its shape as its clients read it, and its times. */

const STATUSES = [
  'validating',
  'failed',
  'in_progress',
  'finalizing',
  'completed',
  'expired',
  'cancelling',
  'cancelled',
] as const;
export type BatchStatus = (typeof STATUSES)[number];

export const ENDED: readonly BatchStatus[] = ['failed', 'completed', 'expired', 'cancelled'];

const time = z.number().int().nullable();

/** OpenAI's batch object, as its clients read it. */
export const batchObjectSchema = z.strictObject({
  id: z.string(),
  object: z.literal('batch'),
  endpoint: z.string(),
  errors: z
    .strictObject({
      object: z.literal('list'),
      data: z.array(
        z.strictObject({
          code: z.string(),
          message: z.string(),
          param: z.string().nullable(),
          line: z.number().nullable(),
        }),
      ),
    })
    .nullable(),
  input_file_id: z.string(),
  completion_window: z.string(),
  status: z.enum(STATUSES),
  output_file_id: z.string().nullable().meta({ description: 'the answers of the lines a route answered with a 2xx' }),
  error_file_id: z
    .string()
    .nullable()
    .meta({ description: 'the other lines: refused, failed, or left unrun by expiry' }),
  created_at: z.number().int(),
  in_progress_at: time,
  expires_at: z.number().int(),
  finalizing_at: time,
  completed_at: time,
  failed_at: time,
  expired_at: time,
  cancelling_at: time,
  cancelled_at: time,
  request_counts: z.strictObject({ total: z.number().int(), completed: z.number().int(), failed: z.number().int() }),
  metadata: z.record(z.string(), z.string()).nullable(),
  model: z.string().nullable().meta({ description: "the model of the batch's first line" }),
});
export type BatchObject = z.infer<typeof batchObjectSchema>;

/** What a runner needs of a batch beside its object: whose it is. */
export interface HeldBatch {
  owner: string;
  batch: BatchObject;
}

export const nowS = () => Math.floor(Date.now() / 1000);
