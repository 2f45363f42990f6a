import { z } from 'zod';
import { emptyInferenceStats, noDuration, type Duration, type InferenceStats, type WorkerInfo } from '@tserve/contract';
import type { ServedModel } from '../serving/served-models.js';

/**
 * Triton's extensions of the v2 protocol that its tools read: a model's configuration (model
 * configuration extension) and its statistics (statistics extension), in Triton's JSON forms, from
 * what the model's live workers announce. perf_analyzer and Triton's model-management scripts read
 * both before they send anything.
 */

/** The v2 routes' view of a model: a classifier's probabilities or logits, or an embedding model's embeddings. */
export interface TritonModel {
  model: ServedModel;
  version: string;
  outputs: string[];
  /** Numbers per row of each output (labels or dimensions); -1 where not known before a call. */
  width: number;
}

/** The only model version served. */
export const VERSION = '1';

type Kind = 'classifier' | 'embedding';

export function kindOf(m: ServedModel): Kind | undefined {
  if (m.task === 'text-classification' || m.task === 'zero-shot-classification') return 'classifier';
  if (m.tasks.includes('feature-extraction')) return 'embedding';
  return undefined;
}

/** Output tensors a model offers, and the default one. */
export function outputsOf(m: ServedModel): string[] {
  return kindOf(m) === 'classifier' ? ['probabilities', 'logits'] : ['embeddings'];
}

export function tritonModel(m: ServedModel): TritonModel {
  const kind = kindOf(m);
  return {
    model: m,
    version: VERSION,
    outputs: kind ? outputsOf(m) : [],
    width: kind === 'classifier' ? (m.labels?.length ?? -1) : -1,
  };
}

const int = z.number().int();
const modelConfigSchema = z.strictObject({
  name: z.string(),
  platform: z.string(),
  backend: z.string(),
  version_policy: z.strictObject({ latest: z.strictObject({ num_versions: int }) }),
  max_batch_size: int,
  input: z.array(
    z.strictObject({
      name: z.string(),
      data_type: z.string(),
      format: z.string(),
      dims: z.array(int),
      reshape: z.strictObject({ shape: z.array(int) }),
      is_shape_tensor: z.boolean(),
      optional: z.boolean(),
    }),
  ),
  output: z.array(
    z.strictObject({
      name: z.string(),
      data_type: z.string(),
      dims: z.array(int),
      label_filename: z.string(),
      is_shape_tensor: z.boolean(),
    }),
  ),
  dynamic_batching: z.strictObject({
    preferred_batch_size: z.array(int),
    max_queue_delay_microseconds: int,
    preserve_ordering: z.boolean(),
    priority_levels: int,
    default_priority_level: int,
  }),
  instance_group: z.array(
    z.strictObject({
      name: z.string(),
      kind: z.enum(['KIND_GPU', 'KIND_CPU']),
      count: int,
      gpus: z.array(int),
      profile: z.array(z.string()),
      passive: z.boolean(),
    }),
  ),
  parameters: z.record(z.string(), z.strictObject({ string_value: z.string() })),
});

const duration = z.strictObject({ count: int, ns: z.number() });
const modelStatsSchema = z.strictObject({
  name: z.string(),
  version: z.string(),
  last_inference: z.number(),
  inference_count: int,
  execution_count: int,
  inference_stats: z.strictObject({
    success: duration,
    fail: duration,
    queue: duration,
    compute_input: duration,
    compute_infer: duration,
    compute_output: duration,
    cache_hit: duration,
    cache_miss: duration,
  }),
  response_stats: z.record(z.string(), z.unknown()),
  batch_stats: z.array(
    z.strictObject({ batch_size: int, compute_input: duration, compute_infer: duration, compute_output: duration }),
  ),
  memory_usage: z.array(z.unknown()),
});
const statisticsSchema = z.strictObject({ model_stats: z.array(modelStatsSchema) });
export type Statistics = z.infer<typeof statisticsSchema>;

/** The shapes of these routes' bodies, for the OpenAPI document. */
export const tritonSchemas = { modelConfig: modelConfigSchema, statistics: statisticsSchema };

const smallest = (values: Array<number | undefined>, fallback: number) => {
  const known = values.filter((v): v is number => v !== undefined);
  return known.length ? Math.min(...known) : fallback;
};

/** `GET /v2/models/<id>/config`: inputs, outputs, batch size and dynamic batching as Triton's model_config gives them. */
export function modelConfig({ model, outputs, width }: TritonModel): z.infer<typeof modelConfigSchema> {
  const workers = model.workers;
  const gpu = workers.some((w) => w.device !== 'cpu');
  const maxBatchSize = smallest(
    workers.map((w) => w.batchMaxSize),
    32,
  );
  const waitMs = smallest(
    workers.map((w) => w.batchMaxWaitMs),
    0,
  );
  return {
    name: model.id,
    platform: 'onnxruntime_onnx',
    backend: 'onnxruntime',
    version_policy: { latest: { num_versions: 1 } },
    max_batch_size: maxBatchSize,
    // With batching, dims leave out the batch dimension: each request row is one text.
    input: [
      {
        name: 'text',
        data_type: 'TYPE_STRING',
        format: 'FORMAT_NONE',
        dims: [1],
        reshape: { shape: [] },
        is_shape_tensor: false,
        optional: false,
      },
    ],
    output: outputs.map((name) => ({
      name,
      data_type: 'TYPE_FP32',
      dims: [width],
      label_filename: '',
      is_shape_tensor: false,
    })),
    dynamic_batching: {
      preferred_batch_size: [maxBatchSize],
      max_queue_delay_microseconds: Math.round(waitMs * 1000),
      preserve_ordering: false,
      // x-priority / parameters.priority: 1 is interactive, 2 batch.
      priority_levels: 2,
      default_priority_level: 1,
    },
    instance_group: [
      {
        name: model.id,
        kind: gpu ? 'KIND_GPU' : 'KIND_CPU',
        count: workers.length,
        gpus: [],
        profile: [],
        passive: false,
      },
    ],
    parameters: {
      task: { string_value: model.task },
      dtype: { string_value: [...new Set(workers.map((w) => w.dtype))].join(',') },
      max_tokens: { string_value: String(model.maxLength) },
      max_batch_tokens: {
        string_value: String(
          smallest(
            workers.map((w) => w.batchMaxTokens),
            0,
          ),
        ),
      },
    },
  };
}

const sum = (a: Duration, b: Duration): Duration => ({ count: a.count + b.count, ns: a.ns + b.ns });

/** The model's live workers' statistics added up; counts start again when a worker restarts. */
function total(workers: WorkerInfo[]): InferenceStats {
  const out = emptyInferenceStats();
  for (const { stats } of workers) {
    if (!stats) continue;
    for (const key of ['success', 'fail', 'queue', 'computeInput', 'computeInfer', 'computeOutput'] as const)
      out[key] = sum(out[key], stats[key]);
    out.inferenceCount += stats.inferenceCount;
    out.executionCount += stats.executionCount;
    out.lastInference = Math.max(out.lastInference, stats.lastInference);
    for (const [size, batch] of Object.entries(stats.batches)) {
      const into = (out.batches[size] ??= {
        computeInput: noDuration(),
        computeInfer: noDuration(),
        computeOutput: noDuration(),
      });
      into.computeInput = sum(into.computeInput, batch.computeInput);
      into.computeInfer = sum(into.computeInfer, batch.computeInfer);
      into.computeOutput = sum(into.computeOutput, batch.computeOutput);
    }
  }
  return out;
}

/** One entry of `model_stats` in `GET /v2/models[/<id>]/stats`, as Triton's statistics extension gives it. */
export function modelStats({ model, version }: TritonModel): z.infer<typeof modelStatsSchema> {
  const stats = total(model.workers);
  return {
    name: model.id,
    version,
    last_inference: stats.lastInference,
    inference_count: stats.inferenceCount,
    execution_count: stats.executionCount,
    inference_stats: {
      success: stats.success,
      fail: stats.fail,
      queue: stats.queue,
      compute_input: stats.computeInput,
      compute_infer: stats.computeInfer,
      compute_output: stats.computeOutput,
      // No response cache at the model: every request is computed.
      cache_hit: noDuration(),
      cache_miss: noDuration(),
    },
    response_stats: {},
    batch_stats: Object.entries(stats.batches)
      .map(([size, b]) => ({
        batch_size: Number(size),
        compute_input: b.computeInput,
        compute_infer: b.computeInfer,
        compute_output: b.computeOutput,
      }))
      .sort((a, b) => a.batch_size - b.batch_size),
    memory_usage: [],
  };
}
