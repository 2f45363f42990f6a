import { z } from 'zod';

/** The wire contract: what clients may send, validated once at the gateway's edge. */

export const TASKS = ['text-classification', 'fill-mask', 'feature-extraction', 'token-classification'] as const;
export type Task = (typeof TASKS)[number];

const nonEmptyText = z
  .string({ error: 'each input must be a string' })
  .min(1, 'inputs must not be empty strings');

export const inputsSchema = z.union([nonEmptyText, z.array(nonEmptyText).min(1, 'inputs must not be an empty list')], {
  error: (issue) =>
    issue.input === undefined ? 'inputs is required' : 'inputs must be a non-empty string or a list of non-empty strings',
});

/** Shared by every task: long inputs are cut to the model's length unless a client says otherwise. */
const common = {
  truncation: z.boolean().optional(),
};

export const parameterSchemas = {
  'text-classification': z
    .object({
      ...common,
      top_k: z.number().int().min(1).nullable().optional(),
      function_to_apply: z.enum(['softmax', 'sigmoid', 'none']).optional(),
    })
    .strict(),
  'fill-mask': z
    .object({
      ...common,
      top_k: z.number().int().min(1).max(1000).optional(),
    })
    .strict(),
  'token-classification': z
    .object({
      ...common,
      aggregation_strategy: z.enum(['none', 'simple', 'first', 'average', 'max']).optional(),
      ignore_labels: z.array(z.string()).optional(),
    })
    .strict(),
  'feature-extraction': z
    .object({
      ...common,
      normalize: z.boolean().optional(),
      pooling: z.enum(['mean', 'cls', 'none']).optional(),
    })
    .strict(),
} satisfies Record<Task, z.ZodType>;

export type TextClassificationParameters = z.infer<(typeof parameterSchemas)['text-classification']>;
export type FillMaskParameters = z.infer<(typeof parameterSchemas)['fill-mask']>;
export type TokenClassificationParameters = z.infer<(typeof parameterSchemas)['token-classification']>;
export type FeatureExtractionParameters = z.infer<(typeof parameterSchemas)['feature-extraction']>;
export type TaskParameters =
  | TextClassificationParameters
  | FillMaskParameters
  | TokenClassificationParameters
  | FeatureExtractionParameters;

/** Who goes first: workers take interactive requests before batch ones, and batch ones are shed first. */
export const PRIORITIES = ['interactive', 'batch'] as const;
export type Priority = (typeof PRIORITIES)[number];

export const optionsSchema = z
  .object({
    /** A client may shorten its deadline, never lengthen it past the server's. */
    timeout_ms: z.number().int().min(1).optional(),
    /** May lower the class an API key gives, never raise it. */
    priority: z.enum(PRIORITIES).optional(),
    // Accepted for Hugging Face Inference API compatibility; the model is always loaded.
    wait_for_model: z.boolean().optional(),
    use_cache: z.boolean().optional(),
  })
  .strict();

/** The Hugging Face Inference API body. `parameters` is checked per task once the model's task is known. */
export const inferenceRequestSchema = z
  .object({
    inputs: inputsSchema,
    parameters: z.record(z.string(), z.unknown()).optional(),
    options: optionsSchema.optional(),
  })
  .strict();

/** Turns zod issues into one sentence a client can act on; paths are prefixed with `prefix` (e.g. "parameters"). */
export function describeIssues(error: z.ZodError, prefix?: string): string {
  return flatten(error.issues)
    .map((issue) => {
      const path = [...(prefix ? [prefix] : []), ...issue.path.map(String)].join('.') || 'body';
      if (issue.code === 'unrecognized_keys') return `${path}: unknown field(s) ${issue.keys.map((k) => `"${k}"`).join(', ')}`;
      return `${path}: ${issue.message}`;
    })
    .join('; ');
}

/**
 * A union's failure says only that no branch fitted. When a branch got further (a list whose
 * item is wrong), its own issues say what to fix, so those are reported instead.
 */
function flatten(issues: z.core.$ZodIssue[]): z.core.$ZodIssue[] {
  return issues.flatMap((issue) => {
    if (issue.code !== 'invalid_union') return [issue];
    const deeper = issue.errors.flat().filter((inner) => inner.path.length > 0);
    if (deeper.length === 0) return [issue];
    return flatten(deeper).map((inner) => ({ ...inner, path: [...issue.path, ...inner.path] }));
  });
}
