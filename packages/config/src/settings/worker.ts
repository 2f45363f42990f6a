import { z } from 'zod';
import { ADVANCED, bool, derived, int, optionalString, setting } from '../setting.js';
import { hubShape } from './hub.js';

/** The worker's settings: its model, the device and dtype it runs on, batching, memory, threads. */

export const DTYPES = ['auto', 'int8-row', 'q8', 'fp32', 'fp16', 'int8', 'uint8', 'q4', 'q4f16', 'bnb4'] as const;
/** `gpu`: the best GPU backend present (webgpu: the one onnxruntime-node ships; cuda needs its own build). */
export const DEVICES = ['cpu', 'cuda', 'webgpu', 'gpu'] as const;

const MODEL_REQUIRED = 'MODEL is required (a model id such as replica/tiny-bert-sst2)';

export const workerShape = {
  MODEL: setting(
    z.string({ error: MODEL_REQUIRED }).min(1, MODEL_REQUIRED),
    'model id, e.g. replica/MiniLM-L6-H384-uncased-sst2',
    '(required)',
  ),
  MODEL_DIR: optionalString(
    'local models root (transformers.js layout); when set, models load offline from it',
    '(hub)',
  ),
  // q8's kernels are CPU kernels: on a GPU they fall back to the CPU.
  DTYPE: setting(z.enum(DTYPES).default('auto'), [
    `${DTYPES.join(' | ')}`,
    'auto: int8-row on cpu, fp16 (else fp32) on a GPU; int8-row: int8 MatMuls with activations quantized per row (answers independent of batch mates), written at first load from model.onnx (else model_quantized.onnx) and cached beside it',
  ]),
  DTYPE_FORCE: bool(false, 'run q8 on a GPU anyway (its integer kernels fall back to the CPU, many times slower)').meta(
    ADVANCED,
  ),
  DEVICE: setting(
    z.enum(DEVICES).default('cpu'),
    `${DEVICES.join(' | ')}; gpu: webgpu (Vulkan), the GPU backend onnxruntime-node ships`,
  ),
  TASK: optionalString('override the task', '(from config.json)'),
  DEFAULT_PROMPT_NAME: optionalString(
    [
      'the prompt put before each input to embed or tokenize that names none (prompt_name)',
      "one of the model's prompts (config_sentence_transformers.json); a request's prompt_name picks another",
    ],
    "(the model's default_prompt_name)",
  ).meta(ADVANCED),
  // Not trimmed: a prompt ends in the space that parts it from the input ("query: ").
  DEFAULT_PROMPT: setting(
    z
      .string()
      .optional()
      .transform((v) => (v === '' ? undefined : v)),
    'text put before each input to embed or tokenize that names no prompt (not with DEFAULT_PROMPT_NAME)',
    '(off)',
  ).meta(ADVANCED),
  MATRYOSHKA_DIMENSIONS: setting(
    z
      .string()
      .optional()
      .transform((v, ctx) => {
        const sizes = (v ?? '')
          .split(',')
          .map((d) => d.trim())
          .filter(Boolean)
          .map(Number);
        if (sizes.some((d) => !Number.isInteger(d) || d < 1)) {
          ctx.addIssue({ code: 'custom', message: `"${v}" is not a list of positive integers` });
          return z.NEVER;
        }
        return sizes.length ? [...new Set(sizes)].sort((a, b) => b - a) : undefined;
      }),
    [
      "the sizes an embedding model's vectors may be shortened to (Matryoshka), comma-separated: 256,128,64",
      "a model trained so that its vectors' first values make a good vector themselves says so on its model card; GET /info lists them (matryoshka_dimensions), and Cohere's output_dimension takes one of them, where OpenAI's and TEI's dimensions cut any model",
    ],
    '(none)',
  ).meta(ADVANCED),
  POOLING: setting(z.enum(['auto', 'splade']).default('auto'), [
    'auto | splade',
    "splade: a masked-LM model serves sparse vectors (/embed_sparse); auto: so does a sentence-transformers SparseEncoder's folder, by its modules.json",
  ]).meta(ADVANCED),
  // Unset: by device (see batchDefaults). A GPU call costs milliseconds however full, so GPUs take larger batches.
  BATCH_MAX_SIZE: setting(
    z.coerce.number().int().min(1).optional(),
    'most sequences in one model call',
    '32 cpu / 128 gpu',
  ),
  BATCH_MAX_WAIT_MS: setting(
    z.coerce.number().min(0).default(2),
    'the one deadline, after the first job, for gathering a batch',
  ).meta(ADVANCED),
  BATCH_MAX_TOKENS: setting(
    z.coerce.number().int().min(1).optional(),
    'most padded tokens (longest x count) in one model call',
    '16384 cpu / 65536 gpu',
  ),
  // A model call's tensors grow with its padded tokens and, for attention, with rows x length squared.
  WORKER_MEMORY_MB: setting(
    // Empty is unset, as compose passes a variable it was not given.
    z.preprocess(
      (v) => (typeof v === 'string' && v.trim() === '' ? undefined : v),
      z.coerce.number().int().min(1).optional(),
    ),
    [
      'the most memory (peak RSS, MiB) the worker process may hold (docs/memory.md)',
      "a quarter under its container's limit; from the model's config the worker derives the largest model call that fits beside the weights and runtime, lowers BATCH_MAX_TOKENS and BATCH_MAX_SIZE to it, and refuses (413) an input too long to fit even alone; on a GPU it bounds nothing. Unset, it is a quarter under the cgroup memory limit (memory.max), or 1024 without one (an all-MiniLM-L6-v2 worker's peak stayed under 1 GB); --help shows this container's",
    ],
    '3/4 of the memory limit, else 1024',
  ),
  MAX_ANSWER_VALUES: int(2_000_000, 1, [
    "most numbers one request's answer may hold (413 above), counted before the model runs",
    'token embeddings (pooling none) are tokens x hidden size; the worker and the gateway each hold the whole answer, as JSON, in memory',
  ]).meta(ADVANCED),
  JOB_LOCK_MS: derived(500, '5 × HEARTBEAT_MS', "job lock: a dead worker's jobs run again after it", 500),
  STALLED_INTERVAL_MS: derived(100, '5 × HEARTBEAT_MS', 'how often workers look for jobs of dead workers'),
  WORKER_ID: optionalString('name in heartbeats and logs', 'host-pid').meta(ADVANCED),
  INTRA_OP_THREADS: setting(
    z.coerce.number().int().min(0).default(0),
    [
      'ONNX Runtime threads per model call; 0: the CPUs this process may use',
      "0 is the cgroup CPU quota (cpu.max) rounded down, at least 1, where one is set, else the affinity mask; --help shows this container's. npm start's workers share the cores: each runs cores / workers threads, at least 1 (bench/README.md, Threads on a shared host)",
    ],
    '0 (npm start: cores / workers)',
  ),
  INTRA_OP_SPINNING: bool(
    false,
    [
      "let ONNX Runtime's threads spin between the steps of a model call",
      "they stop when it returns: a shorter model call, but a spinning thread holds a core others on the host may need meanwhile (with WORKER_NICE it gives way to the gateway and Redis, not to another worker's threads)",
    ],
    'false',
  ).meta(ADVANCED),
  WORKER_NICE: setting(
    z.coerce.number().int().min(-20).max(19).default(0),
    [
      'niceness of the worker process, its model threads included',
      'a worker beside a gateway on one host should yield, so that 503s and /health stay fast while the model saturates the cores',
    ],
    '0 (npm start: 19)',
  ).meta(ADVANCED),
  ...hubShape,
};
