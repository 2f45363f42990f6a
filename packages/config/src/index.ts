import { z } from 'zod';

/**
 * Every setting of every process, parsed from the environment in this one place.
 * Each process calls its loader once at start-up; a bad value stops it with a message
 * naming the variable, instead of surfacing later as a confusing runtime error.
 */

type Env = Record<string, string | undefined>;

const int = (fallback: number, min = 0) => z.coerce.number().int().min(min).default(fallback);
const bool = (fallback: boolean) =>
  z
    .enum(['1', '0', 'true', 'false', 'yes', 'no', 'on', 'off'])
    .default(fallback ? 'true' : 'false')
    .transform((v) => ['1', 'true', 'yes', 'on'].includes(v));
const optionalString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim()));

export const DTYPES = ['auto', 'q8', 'fp32', 'fp16', 'int8', 'uint8', 'q4', 'q4f16', 'bnb4'] as const;
/** `gpu`: the best GPU backend present (webgpu: the one onnxruntime-node ships; cuda needs its own build). */
export const DEVICES = ['cpu', 'cuda', 'webgpu', 'gpu'] as const;
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

const commonShape = {
  REDIS_URL: z.string().url().default('redis://127.0.0.1:6379'),
  /** Key prefix for every queue and key this system writes; tests use their own to stay isolated. */
  QUEUE_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9_.-]+$/, 'letters, digits, "_", "." and "-" only')
    .default('tserve'),
  LOG_LEVEL: z.enum(LOG_LEVELS).default('info'),
  /** How often a worker announces itself, and how long the gateway trusts an announcement. */
  HEARTBEAT_MS: int(1000, 50),
  WORKER_TTL_MS: int(5000, 100),
  /** How long a worker's "cannot load this model" report keeps the model listed as failed. */
  LOAD_FAILURE_TTL_MS: int(600_000, 0),
};

const workerSchema = z.object({
  ...commonShape,
  MODEL: z.string().min(1, 'MODEL is required (a model id such as replica/tiny-bert-sst2)'),
  MODEL_DIR: optionalString,
  /** `auto`: q8 on the CPU; on a GPU fp16 when the model has it, else fp32 (q8's kernels are CPU kernels). */
  DTYPE: z.enum(DTYPES).default('auto'),
  /** Run a dtype that is slow on the chosen device anyway (q8 on a GPU). */
  DTYPE_FORCE: bool(false),
  DEVICE: z.enum(DEVICES).default('cpu'),
  TASK: optionalString,
  /** Unset: by device (see batchDefaults). A GPU call costs milliseconds however full, so GPUs take larger batches. */
  BATCH_MAX_SIZE: z.coerce.number().int().min(1).optional(),
  BATCH_MAX_WAIT_MS: z.coerce.number().min(0).default(2),
  BATCH_MAX_TOKENS: z.coerce.number().int().min(1).optional(),
  /** A job's lock; a killed worker's jobs return to the queue this long after it died. */
  JOB_LOCK_MS: int(5000, 500),
  STALLED_INTERVAL_MS: int(5000, 100),
  WORKER_ID: optionalString,
  /** Threads ONNX Runtime may use inside one model call (0: its default, one per core). */
  INTRA_OP_THREADS: int(0, 0),
  /**
   * ONNX Runtime's threads spin after each call, waiting for the next. On a machine the worker shares
   * with Redis and the gateway that spinning steals their cores, so it is off unless asked for.
   */
  INTRA_OP_SPINNING: bool(false),
  /**
   * Scheduling niceness of the model's threads (Linux: -20..19, higher yields more). On a host the
   * worker shares with a gateway, a positive value lets the gateway answer (and shed) at once while
   * the model saturates the cores; the launcher sets 10.
   */
  WORKER_NICE: z.coerce.number().int().min(-20).max(19).default(0),
});

const gatewaySchema = z.object({
  ...commonShape,
  PORT: int(8000, 0),
  HOST: z.string().default('0.0.0.0'),
  DEFAULT_MODEL: optionalString,
  REQUEST_TIMEOUT_MS: int(30000, 1),
  MAX_QUEUE_DEPTH: int(1000, 1),
  /** Batch-class requests are refused once the depth reaches this share of MAX_QUEUE_DEPTH. */
  BATCH_QUEUE_SHARE: z.coerce.number().min(0).max(1).default(0.5),
  /** JSON file of API keys (see `npm run keys`); re-read when it changes. Unset with API_KEYS unset: no keys needed. */
  API_KEYS_FILE: optionalString,
  /** The same JSON inline, for deployments that pass secrets as variables. */
  API_KEYS: optionalString,
  MAX_INPUTS_PER_REQUEST: int(64, 1),
  MAX_BODY_BYTES: int(1_000_000, 1),
  /** How often the gateway refreshes live workers and queue depths from Redis. */
  REGISTRY_REFRESH_MS: int(250, 20),
  /** How often pending requests fall back to reading their job's state (missed pub/sub messages). */
  RESULT_POLL_MS: int(1000, 20),
  BREAKER_ERROR_PERCENT: int(50, 1),
  BREAKER_VOLUME: int(10, 1),
  BREAKER_RESET_MS: int(5000, 100),
  BREAKER_TIMEOUT_MS: int(2000, 10),
  /** How long Redis calls may wait before failing fast (keeps requests from hanging on a dead Redis). */
  REDIS_COMMAND_TIMEOUT_MS: int(2000, 10),
  SHUTDOWN_GRACE_MS: int(10000, 0),
  /** A client must send its headers within this, and its whole request within the next; slow-drip senders are cut off. */
  HTTP_HEADERS_TIMEOUT_MS: int(10_000, 100),
  HTTP_REQUEST_TIMEOUT_MS: int(30_000, 100),
  DASHBOARD_USER: optionalString,
  DASHBOARD_PASSWORD: optionalString,
  DASHBOARD_TOKEN: optionalString,
  DASHBOARD_READONLY: bool(false),
});

const launcherSchema = z.object({
  ...commonShape,
  MODEL: z.string().default('replica/MiniLM-L6-H384-uncased-sst2'),
  WORKERS: int(1, 0),
  REDIS_SERVER_BIN: z.string().default('redis-server'),
});

/** The worker's settings with the device-dependent defaults filled in. */
export type WorkerConfig = Omit<z.infer<typeof workerSchema>, 'BATCH_MAX_SIZE' | 'BATCH_MAX_TOKENS'> & { BATCH_MAX_SIZE: number; BATCH_MAX_TOKENS: number };

/** Batch limits that fit a device: a CPU call costs per sequence, a GPU call mostly a fixed few milliseconds. */
export function batchDefaults(device: (typeof DEVICES)[number]): { size: number; tokens: number } {
  return device === 'cpu' ? { size: 32, tokens: 16384 } : { size: 128, tokens: 65536 };
}
export type GatewayConfig = z.infer<typeof gatewaySchema>;
export type LauncherConfig = z.infer<typeof launcherSchema> & { models: string[] };

export class ConfigError extends Error {}

function parse<S extends z.ZodType>(schema: S, env: Env): z.infer<S> {
  const result = schema.safeParse(env);
  if (!result.success) {
    const lines = result.error.issues.map((i) => `  ${i.path.join('.') || '(env)'}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  return result.data;
}

export function loadWorkerConfig(env: Env = process.env): WorkerConfig {
  const config = parse(workerSchema, env);
  const defaults = batchDefaults(config.DEVICE);
  return { ...config, BATCH_MAX_SIZE: config.BATCH_MAX_SIZE ?? defaults.size, BATCH_MAX_TOKENS: config.BATCH_MAX_TOKENS ?? defaults.tokens };
}

export function loadGatewayConfig(env: Env = process.env): GatewayConfig {
  return parse(gatewaySchema, env);
}

export function loadLauncherConfig(env: Env = process.env): LauncherConfig {
  const config = parse(launcherSchema, env);
  const models = config.MODEL.split(',')
    .map((m) => m.trim())
    .filter(Boolean);
  if (models.length === 0) throw new ConfigError('invalid configuration:\n  MODEL: name at least one model');
  return { ...config, models };
}

/** The settings table printed by `--help`; kept beside the schemas so it cannot drift from them. */
export const SETTINGS_HELP: Record<'common' | 'worker' | 'gateway' | 'launcher', Array<[string, string, string]>> = {
  common: [
    ['REDIS_URL', 'redis://127.0.0.1:6379', 'Redis holding the queues'],
    ['QUEUE_PREFIX', 'tserve', 'key prefix of every queue and key'],
    ['LOG_LEVEL', 'info', 'pino log level'],
    ['HEARTBEAT_MS', '1000', 'how often a worker announces itself'],
    ['WORKER_TTL_MS', '5000', 'a worker silent this long counts as gone'],
    ['LOAD_FAILURE_TTL_MS', '600000', 'how long a model whose worker failed to load it is reported as failed'],
  ],
  worker: [
    ['MODEL', '(required)', 'model id, e.g. replica/MiniLM-L6-H384-uncased-sst2'],
    ['MODEL_DIR', '(hub)', 'local models root; when set the model loads offline from it'],
    ['DTYPE', 'auto', `${DTYPES.join(' | ')}; auto: q8 on cpu, fp16 (else fp32) on a GPU`],
    ['DTYPE_FORCE', 'false', 'run q8 on a GPU anyway (its integer kernels fall back to the CPU: 20-60x slower)'],
    ['DEVICE', 'cpu', `${DEVICES.join(' | ')}; gpu: webgpu (Vulkan), the GPU backend onnxruntime-node ships`],
    ['TASK', '(from config.json)', 'override the task'],
    ['BATCH_MAX_SIZE', '32 cpu / 128 gpu', 'most sequences in one model call'],
    ['BATCH_MAX_WAIT_MS', '2', 'one deadline after the first job for gathering a batch'],
    ['BATCH_MAX_TOKENS', '16384 cpu / 65536 gpu', 'most padded tokens (longest x count) in one model call'],
    ['JOB_LOCK_MS', '5000', 'job lock; a dead worker\'s jobs are retried after it'],
    ['STALLED_INTERVAL_MS', '5000', 'how often to look for jobs of dead workers'],
    ['WORKER_ID', 'host-pid', 'name in heartbeats and logs'],
    ['INTRA_OP_THREADS', '0', 'ONNX Runtime threads per model call (0: one per core)'],
    ['INTRA_OP_SPINNING', 'false', 'let ONNX Runtime threads spin between calls (dedicated machines)'],
    ['WORKER_NICE', '0', 'niceness of the model threads; 10 beside a gateway on one host (npm start sets it)'],
  ],
  gateway: [
    ['PORT', '8000', 'HTTP port'],
    ['HOST', '0.0.0.0', 'HTTP bind address'],
    ['DEFAULT_MODEL', '(only model served)', 'model for POST /'],
    ['REQUEST_TIMEOUT_MS', '30000', 'deadline of every request (clients may ask for less)'],
    ['MAX_QUEUE_DEPTH', '1000', 'requests in flight per model (all gateways) before new ones get 503'],
    ['BATCH_QUEUE_SHARE', '0.5', 'batch-class requests get 503 once the depth reaches this share of MAX_QUEUE_DEPTH'],
    ['API_KEYS_FILE', '(off)', 'JSON file of hashed API keys (npm run keys -- create); re-read on change'],
    ['API_KEYS', '(off)', 'the same JSON inline; with neither set, no key is needed'],
    ['MAX_INPUTS_PER_REQUEST', '64', 'most list items in one request (413 above)'],
    ['MAX_BODY_BYTES', '1000000', 'largest request body (413 above)'],
    ['REGISTRY_REFRESH_MS', '250', 'how often live workers and queue depths are read'],
    ['RESULT_POLL_MS', '1000', 'fallback poll of job state for pending requests'],
    ['BREAKER_ERROR_PERCENT', '50', 'Redis error rate that opens the circuit breaker'],
    ['BREAKER_VOLUME', '10', 'calls in the window before the breaker may open'],
    ['BREAKER_RESET_MS', '5000', 'open breaker tries a probe after this'],
    ['BREAKER_TIMEOUT_MS', '2000', 'an enqueue slower than this counts as a failure'],
    ['REDIS_COMMAND_TIMEOUT_MS', '2000', 'Redis commands fail after this instead of hanging'],
    ['SHUTDOWN_GRACE_MS', '10000', 'time to answer in-flight requests on SIGTERM'],
    ['HTTP_HEADERS_TIMEOUT_MS', '10000', 'a client must send its request headers within this (408 after)'],
    ['HTTP_REQUEST_TIMEOUT_MS', '30000', 'a client must send its whole request, body included, within this (408 after)'],
    ['DASHBOARD_USER / DASHBOARD_PASSWORD', '(off)', 'basic auth for /admin/queues'],
    ['DASHBOARD_TOKEN', '(off)', 'bearer token for /admin/queues'],
    ['DASHBOARD_READONLY', 'false', 'dashboard without retry/remove buttons'],
  ],
  launcher: [
    ['MODEL', 'replica/MiniLM-L6-H384-uncased-sst2', 'comma-separated; a worker pool per model, the first serves POST /'],
    ['WORKERS', '1', 'worker processes per model'],
    ['REDIS_SERVER_BIN', 'redis-server', 'started when nothing answers at REDIS_URL'],
  ],
};

export function formatHelp(title: string, sections: Array<keyof typeof SETTINGS_HELP>): string {
  // A setting of two programs (MODEL: the launcher's list, the worker's id) is printed once, with
  // the meaning of the first section that lists it: the program whose help this is.
  const seen = new Set<string>();
  const rows = sections.flatMap((s) => SETTINGS_HELP[s]).filter(([name]) => !seen.has(name) && Boolean(seen.add(name)));
  const width = Math.max(...rows.map(([name]) => name.length));
  const defWidth = Math.max(...rows.map(([, def]) => def.length));
  return [
    title,
    '',
    'Settings (environment variables):',
    ...rows.map(([name, def, what]) => `  ${name.padEnd(width)}  ${def.padEnd(defWidth)}  ${what}`),
    '',
  ].join('\n');
}
