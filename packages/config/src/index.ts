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
  /**
   * An internal knob rather than a user's decision: listed after the user settings, under "Advanced".
   * A derived setting (its default computed from other settings) is always advanced.
   */
  advanced?: true;
};

function setting<S extends z.ZodType>(schema: S, description: string, shown?: string): S {
  const help: SettingHelp = { description, ...(shown === undefined ? {} : { shown }) };
  return schema.meta(help);
}

/** Marks a setting advanced (see SettingHelp): `setting(…).meta(ADVANCED)` keeps its help and adds this. */
const ADVANCED: Partial<SettingHelp> = { advanced: true };

/**
 * A setting whose default the loader computes from other settings (`from` says how, in help; the
 * result is at least `floor` where given), and which may still be set: a number, or undefined here.
 */
const derived = (min: number, from: string, help: string, floor?: number) =>
  setting(
    z.coerce.number().int().min(min).optional(),
    `${help} (derived unless set${floor === undefined ? '' : `; the derived value is at least ${floor}`})`,
    from,
  ).meta(ADVANCED);

const int = (fallback: number, min: number, help: string) =>
  setting(z.coerce.number().int().min(min).default(fallback), help);
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

export const DTYPES = ['auto', 'int8-row', 'q8', 'fp32', 'fp16', 'int8', 'uint8', 'q4', 'q4f16', 'bnb4'] as const;
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
  // The one liveness period: the others are derived from it, so that faster failover is one setting.
  HEARTBEAT_MS: int(
    1000,
    50,
    'how often a worker announces itself; WORKER_TTL_MS, JOB_LOCK_MS, STALLED_INTERVAL_MS and REGISTRY_REFRESH_MS follow it, so it sets how soon a dead worker is noticed and its jobs run again: shorter fails over sooner and costs Redis more commands',
  ).meta(ADVANCED),
  WORKER_TTL_MS: derived(100, '5 × HEARTBEAT_MS', 'a worker silent this long counts as gone; above HEARTBEAT_MS'),
  LOAD_FAILURE_TTL_MS: int(600_000, 0, 'how long a model whose worker failed to load it is reported as failed').meta(
    ADVANCED,
  ),
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
  HF_HOME: optionalString('Hugging Face folder; downloads are cached in its hub/ folder', '~/.cache/huggingface').meta(
    ADVANCED,
  ),
  HF_HUB_CACHE: optionalString(
    "the download cache itself, in huggingface_hub's layout (models--ORG--NAME/snapshots/COMMIT/)",
    '$HF_HOME/hub',
  ).meta(ADVANCED),
  HF_HUB_OFFLINE: bool(
    false,
    'load from the download cache only, never the network; a model missing there fails to load, naming the files',
  ),
};

const MODEL_REQUIRED = 'MODEL is required (a model id such as replica/tiny-bert-sst2)';

const workerShape = {
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
  DTYPE: setting(
    z.enum(DTYPES).default('auto'),
    `${DTYPES.join(' | ')}; auto: int8-row on cpu, fp16 (else fp32) on a GPU; int8-row: int8 MatMuls with activations quantized per row (answers independent of batch mates), written at first load from model.onnx (else model_quantized.onnx) and cached beside it`,
  ),
  DTYPE_FORCE: bool(false, 'run q8 on a GPU anyway (its integer kernels fall back to the CPU, many times slower)').meta(
    ADVANCED,
  ),
  DEVICE: setting(
    z.enum(DEVICES).default('cpu'),
    `${DEVICES.join(' | ')}; gpu: webgpu (Vulkan), the GPU backend onnxruntime-node ships`,
  ),
  TASK: optionalString('override the task', '(from config.json)'),
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
    "the most memory (peak RSS, MiB) the worker process may hold, a quarter under its container's limit (docs/memory.md): from the model's config the worker derives the largest model call that fits beside the weights and runtime, lowers BATCH_MAX_TOKENS and BATCH_MAX_SIZE to it, and refuses (413) an input too long to fit even alone; on a GPU it bounds nothing",
    "a quarter under the cgroup memory limit (memory.max); without one, 1024 (an all-MiniLM-L6-v2 worker's peak stayed under 1 GB); --help shows this container's",
  ),
  MAX_ANSWER_VALUES: int(
    2_000_000,
    1,
    "most numbers one request's answer may hold, counted before the model runs (token embeddings, pooling none: tokens x hidden size); more is refused 413, since the worker and the gateway each hold the whole answer, as JSON, in memory",
  ).meta(ADVANCED),
  JOB_LOCK_MS: derived(500, '5 × HEARTBEAT_MS', "job lock; a dead worker's jobs return to the queue after it", 500),
  STALLED_INTERVAL_MS: derived(100, '5 × HEARTBEAT_MS', 'how often workers look for jobs of dead workers'),
  WORKER_ID: optionalString('name in heartbeats and logs', 'host-pid').meta(ADVANCED),
  INTRA_OP_THREADS: int(
    0,
    0,
    "ONNX Runtime threads per model call (0: the CPUs this process may use: the cgroup CPU quota (cpu.max) rounded down, at least 1, where one is set, else the affinity mask; --help shows this container's)",
  ),
  INTRA_OP_SPINNING: bool(
    false,
    "let ONNX Runtime's threads spin between the steps of a model call (they stop when it returns): a shorter model call, but a spinning thread holds a core others on the host may need meanwhile (with WORKER_NICE it gives way to the gateway and Redis, not to another worker's threads)",
    'false (npm start, one worker: true)',
  ).meta(ADVANCED),
  WORKER_NICE: setting(
    z.coerce.number().int().min(-20).max(19).default(0),
    'niceness of the worker process, its model threads included; a worker beside a gateway on one host should yield, so that 503s and /health stay fast while the model saturates the cores',
    '0 (npm start: 19)',
  ).meta(ADVANCED),
  ...hubShape,
};

const gatewayShape = {
  PORT: int(8000, 0, 'HTTP port'),
  HOST: setting(z.string().default('0.0.0.0'), 'HTTP bind address'),
  DEFAULT_MODEL: optionalString('model for POST /', '(only model served)'),
  // Kubernetes: the ConfigMap's list, beside one worker Deployment per model (deploy/kubernetes).
  MODELS: setting(
    z
      .string()
      .optional()
      .transform((v) => [
        ...new Set(
          (v ?? '')
            .split(',')
            .map((m) => m.trim())
            .filter(Boolean),
        ),
      ]),
    'model ids, comma-separated, that this gateway serves even while no worker runs (scaled to zero): a request for one waits (x-wait-for-model) or gets 503 "currently loading", and counts in GET /backlog, which wakes a worker; other models are known from their workers\' heartbeats',
    '(none)',
  ).meta(ADVANCED),
  REQUEST_TIMEOUT_MS: int(
    30000,
    1,
    "deadline of every request (clients may ask for less); the HTTP timeouts on a client's sending and reading follow it",
  ),
  MAX_QUEUE_DEPTH: int(1000, 1, 'requests in flight per model (all gateways) before new ones get 503'),
  BATCH_QUEUE_SHARE: setting(
    z.coerce.number().min(0).max(1).default(0.5),
    'batch-class requests get 503 once the depth reaches this share of MAX_QUEUE_DEPTH',
  ).meta(ADVANCED),
  API_KEYS_FILE: optionalString('JSON file of hashed API keys (npm run keys -- create); re-read on change'),
  // For deployments that pass secrets as variables.
  API_KEYS: optionalString('the same JSON inline; with neither set, no key is needed'),
  MAX_INPUTS_PER_REQUEST: int(64, 1, 'most list items in one request (413 above)'),
  MAX_BODY_BYTES: int(1_000_000, 1, 'largest request body (413 above)'),
  MAX_BODIES_BYTES: int(
    256_000_000,
    1,
    'bytes of request bodies one gateway holds at once, each counted as it is received (not as declared) until its answer; past it, new requests get 503, so that many large bodies cannot exhaust its memory',
  ).meta(ADVANCED),
  REGISTRY_REFRESH_MS: derived(20, 'HEARTBEAT_MS / 4', 'how often live workers and queue depths are read', 20),
  // Covers pub/sub messages missed in a reconnect.
  RESULT_POLL_MS: int(1000, 20, 'fallback poll of job state for pending requests').meta(ADVANCED),
  // Keeps requests from hanging on a dead Redis. The circuit breaker's numbers follow it (breakerSettings).
  REDIS_COMMAND_TIMEOUT_MS: int(
    2000,
    10,
    'Redis commands fail after this instead of hanging; an enqueue slower than this counts as a failure of the circuit breaker on Redis, which, once open, probes Redis again after 2.5 times this (at least a second)',
  ).meta(ADVANCED),
  SHUTDOWN_GRACE_MS: int(10000, 0, 'time to answer in-flight requests on SIGTERM').meta(ADVANCED),
  HTTP_HEADERS_TIMEOUT_MS: derived(
    100,
    'REQUEST_TIMEOUT_MS / 3',
    'a client must send its request headers within this (408 after)',
    1000,
  ),
  HTTP_REQUEST_TIMEOUT_MS: derived(
    100,
    'REQUEST_TIMEOUT_MS',
    'a client must send its whole request, body included, within this (408 after, and disconnected)',
    1000,
  ),
  HTTP_SEND_TIMEOUT_MS: derived(
    100,
    'REQUEST_TIMEOUT_MS',
    'a client must go on reading its answer: one that takes none of it for this long is disconnected',
    1000,
  ),
  MAX_UNREAD_ANSWERS_BYTES: int(
    256_000_000,
    1,
    'bytes of answers one gateway holds for clients that have not read them yet; past it, the connections that have waited longest are closed, so that clients who ask and never read cannot exhaust its memory',
  ).meta(ADVANCED),
  MAX_CONNECTIONS: int(
    10_000,
    1,
    'client connections the gateway holds open; one more is closed at once, so that a flood of connections cannot take the memory and file descriptors that the requests in hand need',
  ).meta(ADVANCED),
  MAX_CONNECTIONS_PER_CLIENT: derived(
    1,
    'MAX_CONNECTIONS / 4',
    "client connections one client address may hold open once the gateway holds half of MAX_CONNECTIONS; one more from it is then closed at once, so that no one client's idle or slow connections refuse everyone else's (behind a proxy that hides clients' addresses and holds more than half, set it to MAX_CONNECTIONS)",
    1,
  ),
  // Off by default: a cached answer is one some worker computed earlier, which a client must opt into trusting.
  RESPONSE_CACHE_TTL_S: int(
    0,
    0,
    "seconds an answer stays in the response cache shared by every gateway (one entry per input, keyed by the weights' sha256, task, parameters and input); 0 turns the cache off",
  ),
  RESPONSE_CACHE_MAX_MB: setting(
    z.coerce.number().positive().default(256),
    "the response cache's own memory bound: past it, its oldest entries are evicted (never queue data, whatever Redis's maxmemory-policy)",
  ).meta(ADVANCED),
  RESPONSE_CACHE_REDIS_URL: optionalString('a Redis of its own for the response cache', '(REDIS_URL)').meta(ADVANCED),
  DASHBOARD_USER: optionalString('basic auth user for /admin/queues (with DASHBOARD_PASSWORD)'),
  DASHBOARD_PASSWORD: optionalString('basic auth password for /admin/queues'),
  DASHBOARD_TOKEN: optionalString('bearer token for /admin/queues'),
  DASHBOARD_READONLY: bool(false, 'dashboard without retry/remove buttons').meta(ADVANCED),
};

const launcherShape = {
  MODEL: setting(
    z.string().default('replica/MiniLM-L6-H384-uncased-sst2'),
    'model ids, comma-separated; a worker pool per model, the first serves POST /',
  ),
  WORKERS: int(1, 0, 'worker processes per model'),
  REDIS_SERVER_BIN: setting(z.string().default('redis-server'), 'started when nothing answers at REDIS_URL').meta(
    ADVANCED,
  ),
};

const workerSchema = z.object({ ...commonShape, ...workerShape });
const gatewaySchema = z.object({ ...commonShape, ...gatewayShape });
const launcherSchema = z.object({ ...commonShape, ...launcherShape });

/** A loader's result: the settings in `K`, optional in the schema, filled in (by device, or derived from other settings). */
type Filled<T, K extends keyof T> = Omit<T, K> & { [P in K]-?: Exclude<T[P], undefined> };

/** The worker's settings with the device-dependent defaults and the derived periods filled in. */
export type WorkerConfig = Filled<
  z.infer<typeof workerSchema>,
  'BATCH_MAX_SIZE' | 'BATCH_MAX_TOKENS' | 'WORKER_TTL_MS' | 'JOB_LOCK_MS' | 'STALLED_INTERVAL_MS'
>;

/** Batch limits that fit a device: a CPU call costs per sequence, a GPU call mostly a fixed few milliseconds. */
function batchDefaults(device: (typeof DEVICES)[number]): { size: number; tokens: number } {
  return device === 'cpu' ? { size: 32, tokens: 16384 } : { size: 128, tokens: 65536 };
}

/** The Redis circuit breaker's numbers, which are not settings: see breakerSettings. */
type BreakerSettings = {
  BREAKER_TIMEOUT_MS: number;
  BREAKER_RESET_MS: number;
  BREAKER_ERROR_PERCENT: number;
  BREAKER_VOLUME: number;
};

/** The gateway's settings with the derived periods and timeouts, and the circuit breaker's numbers, filled in. */
export type GatewayConfig = Filled<
  z.infer<typeof gatewaySchema>,
  | 'WORKER_TTL_MS'
  | 'REGISTRY_REFRESH_MS'
  | 'HTTP_HEADERS_TIMEOUT_MS'
  | 'HTTP_REQUEST_TIMEOUT_MS'
  | 'HTTP_SEND_TIMEOUT_MS'
  | 'MAX_CONNECTIONS_PER_CLIENT'
> &
  BreakerSettings;
export type LauncherConfig = Filled<z.infer<typeof launcherSchema>, 'WORKER_TTL_MS'> & { models: string[] };

export class ConfigError extends Error {}

function parse<S extends z.ZodType>(schema: S, env: Env): z.infer<S> {
  // An empty value counts as unset, so that a compose file can pass `${NAME:-}` for a setting it
  // leaves to the program: its default, or its derivation.
  const set = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined && value.trim() !== ''));
  const result = schema.safeParse(set);
  if (!result.success) {
    const lines = result.error.issues.map((i) => `  ${i.path.join('.') || '(env)'}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  return result.data;
}

/** `value` rounded, and at least `min`. */
const atLeast = (min: number, value: number) => Math.max(min, Math.round(value));

/**
 * How long a silent worker still counts as live: five heartbeats, so that a few beats late (a
 * long collection, a slow Redis) do not count a busy worker gone and send its work elsewhere.
 */
function workerTtl(config: { HEARTBEAT_MS: number; WORKER_TTL_MS?: number }): number {
  const ttl = config.WORKER_TTL_MS ?? 5 * config.HEARTBEAT_MS;
  if (ttl <= config.HEARTBEAT_MS) {
    throw new ConfigError(
      `invalid configuration:\n  WORKER_TTL_MS: ${ttl} must exceed HEARTBEAT_MS (${config.HEARTBEAT_MS}), or a worker lapses between its beats`,
    );
  }
  return ttl;
}

/**
 * The circuit breaker on Redis, from the one Redis timeout: an enqueue that takes longer than a
 * Redis command may counts as a failure; the breaker opens once half of the calls in its window
 * failed, and not before ten calls, so that one cold failure does not trip it; open, it probes
 * Redis again after two and a half command timeouts (at least a second), long enough that a
 * probe against a Redis still down does not keep the breaker half-open most of the time, and
 * short enough that clients told to retry then (Retry-After) find it closed.
 */
function breakerSettings(redisCommandTimeoutMs: number): BreakerSettings {
  return {
    BREAKER_TIMEOUT_MS: redisCommandTimeoutMs,
    BREAKER_RESET_MS: atLeast(1000, 2.5 * redisCommandTimeoutMs),
    BREAKER_ERROR_PERCENT: 50,
    BREAKER_VOLUME: 10,
  };
}

export function loadWorkerConfig(env: Env = process.env): WorkerConfig {
  const config = parse(workerSchema, env);
  const defaults = batchDefaults(config.DEVICE);
  const beat = config.HEARTBEAT_MS;
  return {
    ...config,
    BATCH_MAX_SIZE: config.BATCH_MAX_SIZE ?? defaults.size,
    BATCH_MAX_TOKENS: config.BATCH_MAX_TOKENS ?? defaults.tokens,
    WORKER_TTL_MS: workerTtl(config),
    // As long as a worker's silence: a dead worker's jobs are free to run again about when the
    // gateways stop counting it. The lock is renewed every half of it, so one renewal may be late.
    JOB_LOCK_MS: config.JOB_LOCK_MS ?? atLeast(500, 5 * beat),
    // Once a lock period: a dead worker's jobs are back in the queue within two lock periods.
    STALLED_INTERVAL_MS: config.STALLED_INTERVAL_MS ?? 5 * beat,
  };
}

export function loadGatewayConfig(env: Env = process.env): GatewayConfig {
  const config = parse(gatewaySchema, env);
  const deadline = config.REQUEST_TIMEOUT_MS;
  return {
    ...config,
    WORKER_TTL_MS: workerTtl(config),
    // Several reads a beat: a gateway sees a worker come or go, and the other gateways' depths, well
    // within a heartbeat; each read is a few cheap commands.
    REGISTRY_REFRESH_MS: config.REGISTRY_REFRESH_MS ?? atLeast(20, config.HEARTBEAT_MS / 4),
    // A client gets as long to send its request, and to go on reading its answer, as its request
    // may take to be answered, and a third of that for its headers, which are small: a client slower
    // than that holds a connection for nothing. At least a second each, for clients on slow links.
    HTTP_HEADERS_TIMEOUT_MS: config.HTTP_HEADERS_TIMEOUT_MS ?? atLeast(1000, deadline / 3),
    HTTP_REQUEST_TIMEOUT_MS: config.HTTP_REQUEST_TIMEOUT_MS ?? atLeast(1000, deadline),
    HTTP_SEND_TIMEOUT_MS: config.HTTP_SEND_TIMEOUT_MS ?? atLeast(1000, deadline),
    // A quarter: one address (a runaway client, or one attacker) leaves most connections to the rest.
    MAX_CONNECTIONS_PER_CLIENT: config.MAX_CONNECTIONS_PER_CLIENT ?? atLeast(1, config.MAX_CONNECTIONS / 4),
    ...breakerSettings(config.REDIS_COMMAND_TIMEOUT_MS),
  };
}

export function loadLauncherConfig(env: Env = process.env): LauncherConfig {
  const config = parse(launcherSchema, env);
  const models = config.MODEL.split(',')
    .map((m) => m.trim())
    .filter(Boolean);
  if (models.length === 0) throw new ConfigError('invalid configuration:\n  MODEL: name at least one model');
  return { ...config, WORKER_TTL_MS: workerTtl(config), models };
}

/** The settings of each program, as `--help` lists them: `common` is every program's. */
export const SETTINGS = {
  common: commonShape,
  worker: workerShape,
  gateway: gatewayShape,
  launcher: launcherShape,
} satisfies Record<string, z.ZodRawShape>;

/** The default a setting's schema fills in, found under its transforms and optional wrappers. */
function schemaDefault(schema: z.core.$ZodType): unknown {
  const def = schema._zod.def as {
    type: string;
    defaultValue?: unknown;
    in?: z.core.$ZodType;
    innerType?: z.core.$ZodType;
  };
  if (def.type === 'default') return def.defaultValue;
  if (def.type === 'pipe' && def.in) return schemaDefault(def.in);
  if ((def.type === 'optional' || def.type === 'nullable') && def.innerType) return schemaDefault(def.innerType);
  return undefined;
}

/** A setting's help, as `setting` and `.meta(ADVANCED)` registered it. */
function meta(schema: z.core.$ZodType): Partial<SettingHelp> {
  return z.globalRegistry.get(schema) ?? {};
}

/** Whether a setting is advanced (an internal knob or a derived setting) rather than a user's decision. */
export function isAdvanced(schema: z.core.$ZodType): boolean {
  return meta(schema).advanced === true;
}

/** One setting's help row: name, default as shown, description. */
export function settingHelp(name: string, schema: z.core.$ZodType): [string, string, string] {
  const { description, shown } = meta(schema);
  if (!description) throw new Error(`setting ${name} has no help text`);
  const value = schemaDefault(schema);
  return [
    name,
    shown ?? (value === undefined ? '(none)' : typeof value === 'string' ? value : JSON.stringify(value)),
    description,
  ];
}

type Section = keyof typeof SETTINGS;

/** The settings of `sections`, user settings then advanced ones, each in declaration order. */
function tiers(sections: Section[]): {
  user: Array<[string, z.core.$ZodType]>;
  advanced: Array<[string, z.core.$ZodType]>;
} {
  const all = sections.flatMap((section) => Object.entries(SETTINGS[section] as Record<string, z.core.$ZodType>));
  return {
    user: all.filter(([, schema]) => !isAdvanced(schema)),
    advanced: all.filter(([, schema]) => isAdvanced(schema)),
  };
}

const ADVANCED_NOTE =
  'internal knobs whose defaults suit most deployments; a derived one follows the settings its default names, unless it is set';

export function formatHelp(title: string, sections: Section[]): string {
  // A setting of two programs (MODEL: the launcher's list, the worker's id) is printed once, with
  // the meaning of the first section that lists it: the program whose help this is.
  const seen = new Set<string>();
  const rows = (settings: Array<[string, z.core.$ZodType]>) =>
    settings
      .map(([name, schema]) => settingHelp(name, schema))
      .filter(([name]) => !seen.has(name) && Boolean(seen.add(name)));
  const { user, advanced } = tiers(sections);
  const [userRows, advancedRows] = [rows(user), rows(advanced)];
  const width = Math.max(...[...userRows, ...advancedRows].map(([name]) => name.length));
  const defWidth = Math.max(...[...userRows, ...advancedRows].map(([, def]) => def.length));
  const lines = (list: Array<[string, string, string]>) =>
    list.map(([name, def, what]) => `  ${name.padEnd(width)}  ${def.padEnd(defWidth)}  ${what}`);
  return [
    title,
    '',
    'Settings (environment variables):',
    ...lines(userRows),
    ...(advancedRows.length > 0 ? ['', `Advanced settings (${ADVANCED_NOTE}):`, ...lines(advancedRows)] : []),
    '',
  ].join('\n');
}

const SECTION_TITLES: Record<Section, string> = {
  common: 'Every program',
  gateway: 'Gateway (`node apps/gateway/dist/main.js`)',
  worker: 'Worker (`node apps/worker/dist/main.js`)',
  launcher:
    '`npm start` (`node apps/launcher/dist/main.js`), which passes every other setting on to the gateway and workers it starts',
};

/** docs/configuration.md's settings tables, one per program and tier, from the same declarations as `--help`. */
export function formatSettingsMarkdown(): string {
  const cell = (text: string) => text.replaceAll('|', '\\|');
  // A derived default names the settings it follows: those names in code type, the rest as words.
  const value = (shown: string) =>
    shown.startsWith('(')
      ? shown
      : /[A-Z]_[A-Z]/.test(shown)
        ? shown.replace(/\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b/g, '`$&`')
        : `\`${shown}\``;
  const tables = (tier: 'user' | 'advanced') =>
    (Object.keys(SECTION_TITLES) as Section[])
      .map((section) => [section, tiers([section])[tier]] as const)
      .filter(([, settings]) => settings.length > 0)
      .map(([section, settings]) =>
        [
          `${SECTION_TITLES[section]}:`,
          '',
          '| setting | default | meaning |',
          '|---|---|---|',
          ...settings.map(([name, schema]) => {
            const [, shown, description] = settingHelp(name, schema);
            return `| \`${name}\` | ${cell(value(shown))} | ${cell(description)} |`;
          }),
        ].join('\n'),
      )
      .join('\n\n');
  return [
    '## User settings',
    tables('user'),
    '## Advanced settings',
    `\`--help\` lists these after the user settings: ${ADVANCED_NOTE}.`,
    tables('advanced'),
  ].join('\n\n');
}
