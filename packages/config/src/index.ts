import { z } from 'zod';

/**
 * Every setting of every process, parsed from the environment in this one place.
 * Each process calls its loader once at start-up; a bad value stops it with a message
 * naming the variable, instead of surfacing later as a confusing runtime error.
 */

type Env = Record<string, string | undefined>;

/**
 * Each setting is declared once, here: its schema (type, bounds, default) and its help text. `--help`
 * is generated from these declarations, so a setting cannot exist without being described.
 */
type SettingHelp = {
  description: string;
  /** The default as help prints it, where the schema's own default says less (it depends on the device, or the setting is off). */
  shown?: string;
};

function setting<S extends z.ZodType>(schema: S, description: string, shown?: string): S {
  const help: SettingHelp = { description, ...(shown === undefined ? {} : { shown }) };
  return schema.meta(help);
}

const int = (fallback: number, min: number, help: string) => setting(z.coerce.number().int().min(min).default(fallback), help);
const bool = (fallback: boolean, help: string, shown?: string) =>
  setting(
    z
      .enum(['1', '0', 'true', 'false', 'yes', 'no', 'on', 'off'])
      .default(fallback ? 'true' : 'false')
      .transform((v) => ['1', 'true', 'yes', 'on'].includes(v)),
    help,
    shown,
  );
const optionalString = (help: string, shown = '(off)') =>
  setting(
    z
      .string()
      .optional()
      .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim())),
    help,
    shown,
  );

export const DTYPES = ['auto', 'q8', 'fp32', 'fp16', 'int8', 'uint8', 'q4', 'q4f16', 'bnb4'] as const;
/** `gpu`: the best GPU backend present (webgpu: the one onnxruntime-node ships; cuda needs its own build). */
export const DEVICES = ['cpu', 'cuda', 'webgpu', 'gpu'] as const;
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

const commonShape = {
  REDIS_URL: setting(z.string().url().default('redis://127.0.0.1:6379'), 'Redis holding the queues'),
  // Tests use their own prefix to stay isolated; deployments sharing a Redis use one each.
  QUEUE_PREFIX: setting(
    z
      .string()
      .regex(/^[A-Za-z0-9_.-]+$/, 'letters, digits, "_", "." and "-" only')
      .default('tserve'),
    'key prefix of every queue and key (several deployments can share a Redis)',
  ),
  LOG_LEVEL: setting(z.enum(LOG_LEVELS).default('info'), 'pino log level'),
  HEARTBEAT_MS: int(1000, 50, 'how often a worker announces itself'),
  WORKER_TTL_MS: int(5000, 100, 'a worker silent this long counts as gone'),
  LOAD_FAILURE_TTL_MS: int(600_000, 0, 'how long a model whose worker failed to load it is reported as failed'),
};

/**
 * Where a worker without MODEL_DIR gets its model: the hub or a mirror. The names are
 * huggingface_hub's (and TEI's), so that an operator's existing settings work unchanged.
 */
const hubShape = {
  HF_ENDPOINT: setting(
    z
      .string()
      .url()
      .default('https://huggingface.co')
      .transform((v) => v.replace(/\/+$/, '')),
    "the hub or a mirror to download models from, in the hub's URL layout (ENDPOINT/ORG/NAME/resolve/REVISION/FILE)",
  ),
  MODEL_REVISION: setting(
    z
      .string()
      .regex(/^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/, 'a branch, tag or commit id')
      .refine((v) => !v.split('/').includes('..'), 'a branch, tag or commit id')
      .default('main'),
    'branch, tag or commit id of the model on the hub; a commit id pins the weights exactly',
  ),
  // A secret: sent only to HF_ENDPOINT, never logged.
  HF_TOKEN: optionalString('token for gated and private models, sent only to HF_ENDPOINT', '(none)'),
  HF_HOME: optionalString('Hugging Face folder; downloads are cached in its hub/ folder', '~/.cache/huggingface'),
  HF_HUB_CACHE: optionalString("the download cache itself, in huggingface_hub's layout (models--ORG--NAME/snapshots/COMMIT/)", '$HF_HOME/hub'),
  HF_HUB_OFFLINE: bool(false, 'load from the download cache only, never the network; a model missing there fails to load, naming the files'),
};

const MODEL_REQUIRED = 'MODEL is required (a model id such as replica/tiny-bert-sst2)';

const workerShape = {
  MODEL: setting(z.string({ error: MODEL_REQUIRED }).min(1, MODEL_REQUIRED), 'model id, e.g. replica/MiniLM-L6-H384-uncased-sst2', '(required)'),
  MODEL_DIR: optionalString('local models root (transformers.js layout); when set, models load offline from it', '(hub)'),
  // q8's kernels are CPU kernels: on a GPU they fall back to the CPU.
  DTYPE: setting(z.enum(DTYPES).default('auto'), `${DTYPES.join(' | ')}; auto: q8 on cpu, fp16 (else fp32) on a GPU`),
  DTYPE_FORCE: bool(false, 'run q8 on a GPU anyway (its integer kernels fall back to the CPU: 20-60x slower)'),
  DEVICE: setting(z.enum(DEVICES).default('cpu'), `${DEVICES.join(' | ')}; gpu: webgpu (Vulkan), the GPU backend onnxruntime-node ships`),
  TASK: optionalString('override the task', '(from config.json)'),
  // Unset: by device (see batchDefaults). A GPU call costs milliseconds however full, so GPUs take larger batches.
  BATCH_MAX_SIZE: setting(z.coerce.number().int().min(1).optional(), 'most sequences in one model call', '32 cpu / 128 gpu'),
  BATCH_MAX_WAIT_MS: setting(z.coerce.number().min(0).default(2), 'the one deadline, after the first job, for gathering a batch'),
  BATCH_MAX_TOKENS: setting(z.coerce.number().int().min(1).optional(), 'most padded tokens (longest x count) in one model call', '16384 cpu / 65536 gpu'),
  MAX_ANSWER_VALUES: int(
    2_000_000,
    1,
    "most numbers one request's answer may hold, counted before the model runs (token embeddings, pooling none: tokens x hidden size); more is refused 413, since the worker and the gateway each hold the whole answer, as JSON, in memory",
  ),
  JOB_LOCK_MS: int(5000, 500, "job lock; a dead worker's jobs return to the queue after it"),
  STALLED_INTERVAL_MS: int(5000, 100, 'how often workers look for jobs of dead workers'),
  WORKER_ID: optionalString('name in heartbeats and logs', 'host-pid'),
  INTRA_OP_THREADS: int(
    0,
    0,
    "ONNX Runtime threads per model call (0: ONNX Runtime's default, a thread per physical core as it counts them, which on some VMs is fewer than the OS shows: set the number where it matters)",
  ),
  INTRA_OP_SPINNING: bool(
    false,
    "let ONNX Runtime's threads spin while they wait for work: a shorter model call, but a spinning thread holds a core others on the host may need (with WORKER_NICE it gives way to the gateway and Redis, not to another worker's threads)",
    'false (npm start, one worker: true)',
  ),
  WORKER_NICE: setting(
    z.coerce.number().int().min(-20).max(19).default(0),
    'niceness of the worker process, its model threads included; a worker beside a gateway on one host should yield, so that 503s and /health stay fast while the model saturates the cores',
    '0 (npm start: 19)',
  ),
  ...hubShape,
};

const gatewayShape = {
  PORT: int(8000, 0, 'HTTP port'),
  HOST: setting(z.string().default('0.0.0.0'), 'HTTP bind address'),
  DEFAULT_MODEL: optionalString('model for POST /', '(only model served)'),
  REQUEST_TIMEOUT_MS: int(30000, 1, 'deadline of every request (clients may ask for less)'),
  MAX_QUEUE_DEPTH: int(1000, 1, 'requests in flight per model (all gateways) before new ones get 503'),
  BATCH_QUEUE_SHARE: setting(z.coerce.number().min(0).max(1).default(0.5), 'batch-class requests get 503 once the depth reaches this share of MAX_QUEUE_DEPTH'),
  API_KEYS_FILE: optionalString('JSON file of hashed API keys (npm run keys -- create); re-read on change'),
  // For deployments that pass secrets as variables.
  API_KEYS: optionalString('the same JSON inline; with neither set, no key is needed'),
  MAX_INPUTS_PER_REQUEST: int(64, 1, 'most list items in one request (413 above)'),
  MAX_BODY_BYTES: int(1_000_000, 1, 'largest request body (413 above)'),
  MAX_BODIES_BYTES: int(
    256_000_000,
    1,
    'bytes of request bodies one gateway holds at once, each counted at its declared size (MAX_BODY_BYTES if chunked) from admission to answer; one more gets 503, so that many large bodies cannot exhaust its memory',
  ),
  REGISTRY_REFRESH_MS: int(250, 20, 'how often live workers and queue depths are read'),
  // Covers pub/sub messages missed in a reconnect.
  RESULT_POLL_MS: int(1000, 20, 'fallback poll of job state for pending requests'),
  BREAKER_ERROR_PERCENT: int(50, 1, 'Redis error rate that opens the circuit breaker'),
  BREAKER_VOLUME: int(10, 1, 'calls in the window before the breaker may open'),
  BREAKER_RESET_MS: int(5000, 100, 'open breaker tries a probe after this'),
  BREAKER_TIMEOUT_MS: int(2000, 10, 'an enqueue slower than this counts as a failure'),
  // Keeps requests from hanging on a dead Redis.
  REDIS_COMMAND_TIMEOUT_MS: int(2000, 10, 'Redis commands fail after this instead of hanging'),
  SHUTDOWN_GRACE_MS: int(10000, 0, 'time to answer in-flight requests on SIGTERM'),
  HTTP_HEADERS_TIMEOUT_MS: int(10_000, 100, 'a client must send its request headers within this (408 after)'),
  HTTP_REQUEST_TIMEOUT_MS: int(30_000, 100, 'a client must send its whole request, body included, within this (408 after, and disconnected)'),
  HTTP_SEND_TIMEOUT_MS: int(30_000, 100, 'a client must go on reading its answer: one that takes none of it for this long is disconnected'),
  MAX_UNREAD_ANSWERS_BYTES: int(
    256_000_000,
    1,
    'bytes of answers one gateway holds for clients that have not read them yet; past it, the connections that have waited longest are closed, so that clients who ask and never read cannot exhaust its memory',
  ),
  MAX_CONNECTIONS: int(
    10_000,
    1,
    'client connections the gateway holds open; one more is closed at once, so that a flood of connections cannot take the memory and file descriptors that the requests in hand need',
  ),
  DASHBOARD_USER: optionalString('basic auth user for /admin/queues (with DASHBOARD_PASSWORD)'),
  DASHBOARD_PASSWORD: optionalString('basic auth password for /admin/queues'),
  DASHBOARD_TOKEN: optionalString('bearer token for /admin/queues'),
  DASHBOARD_READONLY: bool(false, 'dashboard without retry/remove buttons'),
};

const launcherShape = {
  MODEL: setting(z.string().default('replica/MiniLM-L6-H384-uncased-sst2'), 'model ids, comma-separated; a worker pool per model, the first serves POST /'),
  WORKERS: int(1, 0, 'worker processes per model'),
  REDIS_SERVER_BIN: setting(z.string().default('redis-server'), 'started when nothing answers at REDIS_URL'),
};

const workerSchema = z.object({ ...commonShape, ...workerShape });
const gatewaySchema = z.object({ ...commonShape, ...gatewayShape });
const launcherSchema = z.object({ ...commonShape, ...launcherShape });

/** The worker's settings with the device-dependent defaults filled in. */
export type WorkerConfig = Omit<z.infer<typeof workerSchema>, 'BATCH_MAX_SIZE' | 'BATCH_MAX_TOKENS'> & { BATCH_MAX_SIZE: number; BATCH_MAX_TOKENS: number };

/** Batch limits that fit a device: a CPU call costs per sequence, a GPU call mostly a fixed few milliseconds. */
function batchDefaults(device: (typeof DEVICES)[number]): { size: number; tokens: number } {
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

/** The settings of each program, as `--help` lists them: `common` is every program's. */
export const SETTINGS = { common: commonShape, worker: workerShape, gateway: gatewayShape, launcher: launcherShape } satisfies Record<string, z.ZodRawShape>;

/** The default a setting's schema fills in, found under its transforms and optional wrappers. */
function schemaDefault(schema: z.core.$ZodType): unknown {
  const def = schema._zod.def as { type: string; defaultValue?: unknown; in?: z.core.$ZodType; innerType?: z.core.$ZodType };
  if (def.type === 'default') return def.defaultValue;
  if (def.type === 'pipe' && def.in) return schemaDefault(def.in);
  if ((def.type === 'optional' || def.type === 'nullable') && def.innerType) return schemaDefault(def.innerType);
  return undefined;
}

/** One setting's help row: name, default as shown, description. */
export function settingHelp(name: string, schema: z.core.$ZodType): [string, string, string] {
  const meta = (z.globalRegistry.get(schema) ?? {}) as Partial<SettingHelp>;
  if (!meta.description) throw new Error(`setting ${name} has no help text`);
  const value = schemaDefault(schema);
  const shown = meta.shown ?? (value === undefined ? '(none)' : typeof value === 'string' ? value : JSON.stringify(value));
  return [name, shown, meta.description];
}

export function formatHelp(title: string, sections: Array<keyof typeof SETTINGS>): string {
  // A setting of two programs (MODEL: the launcher's list, the worker's id) is printed once, with
  // the meaning of the first section that lists it: the program whose help this is.
  const seen = new Set<string>();
  const rows = sections
    .flatMap((section) => Object.entries(SETTINGS[section] as Record<string, z.core.$ZodType>).map(([name, schema]) => settingHelp(name, schema)))
    .filter(([name]) => !seen.has(name) && Boolean(seen.add(name)));
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

const SECTION_TITLES: Record<keyof typeof SETTINGS, string> = {
  common: 'Every program',
  gateway: 'Gateway (`node apps/gateway/dist/main.js`)',
  worker: 'Worker (`node apps/worker/dist/main.js`)',
  launcher: '`npm start` (`node apps/launcher/dist/main.js`), which passes every other setting on to the gateway and workers it starts',
};

/** The README's settings tables, one per program, from the same declarations as `--help`. */
export function formatSettingsMarkdown(): string {
  const cell = (text: string) => text.replaceAll('|', '\\|');
  const value = (shown: string) => (shown.startsWith('(') ? shown : `\`${shown}\``);
  return (Object.keys(SECTION_TITLES) as Array<keyof typeof SETTINGS>)
    .map((section) =>
      [
        `${SECTION_TITLES[section]}:`,
        '',
        '| setting | default | meaning |',
        '|---|---|---|',
        ...Object.entries(SETTINGS[section] as Record<string, z.core.$ZodType>).map(([name, schema]) => {
          const [, shown, description] = settingHelp(name, schema);
          return `| \`${name}\` | ${cell(value(shown))} | ${cell(description)} |`;
        }),
      ].join('\n'),
    )
    .join('\n\n');
}
