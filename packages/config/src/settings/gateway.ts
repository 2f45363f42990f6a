import { z } from 'zod';
import { ADVANCED, bool, derived, int, optionalString, setting } from '../setting.js';

/** The gateway's settings: HTTP, admission limits, keys, timeouts, the response cache, the dashboard. */

export const gatewayShape = {
  PORT: int(8000, 0, 'HTTP port'),
  HOST: setting(z.string().default('0.0.0.0'), 'HTTP bind address'),
  GRPC_PORT: int(8001, 0, [
    "gRPC port, on HOST: KServe v2 / Triton's GRPCInferenceService, TEI's tei.v1, health and reflection",
    'the .proto files are in packages/contract/proto; 0 turns gRPC off',
  ]).meta(ADVANCED),
  DEFAULT_MODEL: optionalString('model for POST /', '(only model served)'),
  MODEL_ALIASES: setting(
    z
      .string()
      .optional()
      .transform((v, ctx) => {
        const aliases: Record<string, string> = {};
        for (const entry of (v ?? '')
          .split(',')
          .map((e) => e.trim())
          .filter(Boolean)) {
          const [alias, id, ...rest] = entry.split('=').map((part) => part.trim());
          if (!alias || !id || rest.length) {
            ctx.addIssue({ code: 'custom', message: `"${entry}" is not alias=model id` });
            return z.NEVER;
          }
          aliases[alias] = id;
        }
        return aliases;
      }),
    [
      'other names for served models, comma-separated alias=model id: nomic-embed-text=<model id>',
      "the names clients of Ollama's and Cohere's embed routes send by default reach a model served here; GET /api/tags lists each alias beside the ids. A name with Ollama's tag `:latest` is the name without it",
    ],
    '(none)',
  ).meta(ADVANCED),
  ROOT_PATH: setting(
    z
      .string()
      .optional()
      .transform((v, ctx) => {
        const path = (v ?? '').trim().replace(/\/+$/, '');
        if (path === '') return undefined;
        if (!path.startsWith('/') || /[?#\s]/.test(path)) {
          ctx.addIssue({ code: 'custom', message: `"${v}" is not a path: it starts with / (as /tserve)` });
          return z.NEVER;
        }
        return path;
      }),
    [
      'a path prefix every route is served under (/tserve): behind an ingress that forwards a path as it is',
      'every route, the dashboard, /docs and /openapi.json answer under it, and nothing outside it (404): health probes ask for ROOT_PATH/health and ROOT_PATH/ready too. gRPC is not affected',
    ],
    '(none)',
  ).meta(ADVANCED),
  // Vertex AI sets these three in the container it starts (its custom-container contract).
  AIP_HTTP_PORT: setting(
    z.coerce.number().int().min(1).optional(),
    "Vertex AI's port: where set, the HTTP port in PORT's place",
    '(PORT)',
  ).meta(ADVANCED),
  AIP_HEALTH_ROUTE: optionalString(
    "Vertex AI's health route: answers as /ready does (200 once every model is served)",
  ).meta(ADVANCED),
  AIP_PREDICT_ROUTE: optionalString([
    "Vertex AI's prediction route, answered as TEI's /vertex",
    '{"instances": [TEI bodies]} in, {"predictions": [their answers]} out (docs/api/tei.md)',
  ]).meta(ADVANCED),
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
    [
      'model ids, comma-separated, served even while no worker runs (scaled to zero)',
      'a request for one waits (x-wait-for-model) or gets 503 "currently loading", and counts in GET /backlog, which wakes a worker; other models are known from their workers\' heartbeats',
    ],
    '(none)',
  ).meta(ADVANCED),
  REQUEST_TIMEOUT_MS: int(30000, 1, [
    'deadline of every request (clients may ask for less)',
    "the HTTP timeouts on a client's sending and reading follow it",
  ]),
  MAX_QUEUE_DEPTH: int(1000, 1, 'requests in flight per model (all gateways) before new ones get 503'),
  BATCH_QUEUE_SHARE: setting(
    z.coerce.number().min(0).max(1).default(0.5),
    'bulk-class requests (x-priority: batch) get 503 once the depth reaches this share of MAX_QUEUE_DEPTH',
  ).meta(ADVANCED),
  API_KEYS_FILE: optionalString('JSON file of hashed API keys (npm run keys -- create); re-read on change'),
  // For deployments that pass secrets as variables.
  API_KEYS: optionalString('the same JSON inline; with neither set, no key is needed'),
  MAX_INPUTS_PER_REQUEST: int(2048, 1, [
    'most list items (inputs, documents, and model sequences) in one request (413 above)',
    "OpenAI's own limit for embeddings. A request larger than a worker's batch is split into pieces of at most BATCH_MAX_SIZE sequences, sent as jobs any worker may take and answered as one, in order; each piece counts in the queue depth as a request does",
  ]),
  MAX_BODY_BYTES: int(8_000_000, 1, [
    'largest request body (413 above)',
    "room for 2,048 inputs of a few thousand characters each, or of tiktoken's token ids (LangChain's default)",
  ]),
  MAX_BODIES_BYTES: int(256_000_000, 1, [
    'bytes of request bodies one gateway holds at once; past it, new requests get 503',
    "each body counts as it is received (not as declared) until its answer, so that many large bodies cannot exhaust the gateway's memory",
  ]).meta(ADVANCED),
  REGISTRY_REFRESH_MS: derived(20, 'HEARTBEAT_MS / 4', 'how often live workers and queue depths are read', 20),
  // Covers pub/sub messages missed in a reconnect.
  RESULT_POLL_MS: int(1000, 20, 'fallback poll of job state for pending requests').meta(ADVANCED),
  // Keeps requests from hanging on a dead Redis. The circuit breaker's numbers follow it (breakerSettings).
  REDIS_COMMAND_TIMEOUT_MS: int(2000, 10, [
    'Redis commands fail after this instead of hanging',
    'an enqueue slower than this counts as a failure of the circuit breaker on Redis, which, once open, probes Redis again after 2.5 times this (at least a second)',
  ]).meta(ADVANCED),
  REDIS_FAILOVER_WAIT_MS: int(10_000, 0, [
    'how long requests sent to a lost Redis wait for it to come back (a failover) before a 503',
    "their outcomes may still come from the new primary; past this, or once the new primary shows their jobs lost, each gets a 503 naming the cause instead of waiting out its deadline. Set it above the sentinels' down-after-milliseconds plus a failover's own second or two",
  ]).meta(ADVANCED),
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
    'a client must send its whole request within this (408 after)',
    1000,
  ),
  HTTP_SEND_TIMEOUT_MS: derived(
    100,
    'REQUEST_TIMEOUT_MS',
    [
      'a client reading none of its answer this long is disconnected',
      'a client must go on reading its answer as it is written',
    ],
    1000,
  ),
  MAX_UNREAD_ANSWERS_BYTES: int(256_000_000, 1, [
    'bytes of answers one gateway holds for clients that have not read them yet',
    'past it, the connections that have waited longest are closed, so that clients who ask and never read cannot exhaust its memory',
  ]).meta(ADVANCED),
  MAX_CONNECTIONS: int(10_000, 1, [
    'client connections the gateway holds open; one more is closed at once',
    'so that a flood of connections cannot take the memory and file descriptors that the requests in hand need',
  ]).meta(ADVANCED),
  MAX_CONNECTIONS_PER_CLIENT: derived(
    1,
    'MAX_CONNECTIONS / 4',
    [
      'most connections one address may hold past half of MAX_CONNECTIONS',
      "one more from it is then closed at once, so that no one client's idle or slow connections refuse everyone else's; behind a proxy that hides clients' addresses and holds more than half, set it to MAX_CONNECTIONS",
    ],
    1,
  ),
  // Off by default: a cached answer is one some worker computed earlier, which a client must opt into trusting.
  RESPONSE_CACHE_TTL_S: int(0, 0, [
    'seconds an answer stays in the response cache of every gateway; 0 turns it off',
    "one entry per input, keyed by the weights' sha256, the task, the parameters and the input, shared by every gateway",
  ]),
  RESPONSE_CACHE_MAX_MB: setting(z.coerce.number().positive().default(256), [
    "the response cache's own memory bound: past it, its oldest entries are evicted",
    "never queue data, whatever Redis's maxmemory-policy",
  ]).meta(ADVANCED),
  RESPONSE_CACHE_REDIS_URL: optionalString('a Redis of its own for the response cache', '(REDIS_URL)').meta(ADVANCED),
  // OpenAI's own limits for its Batch API: 200 MB and 50,000 lines a file.
  FILES_MAX_MB: int(200, 1, 'largest file POST /v1/files takes for a batch (413 above)').meta(ADVANCED),
  FILES_MAX_LINES: int(50_000, 1, "most lines in a batch's file (413 above)").meta(ADVANCED),
  FILES_STORE_MAX_MB: int(1024, 1, [
    "what batches' files, inputs and outputs, may take in Redis in all (507 past it)",
    'see docs/api/batches.md for what a million lines costs',
  ]).meta(ADVANCED),
  FILES_TTL_S: int(2_592_000, 1, [
    "seconds a batch's files and the batch itself are kept",
    "OpenAI's 30 days by default; a file's expires_at says when it goes",
  ]).meta(ADVANCED),
  OPENAI_TOKEN_ENCODING: setting(
    z.enum(['cl100k_base', 'o200k_base', 'p50k_base', 'r50k_base', 'off']).default('cl100k_base'),
    [
      "the tiktoken encoding that reads token ids sent as OpenAI embeddings' input; off refuses them",
      "LangChain's OpenAIEmbeddings sends each text as tiktoken's ids by default (cl100k_base where it does not know the model). The ids are decoded into their text, which the model's own tokenizer then reads: the vectors are those of the text. off answers 400 to token ids",
    ],
  ).meta(ADVANCED),
  DASHBOARD_USER: optionalString('basic auth user for /admin/queues (with DASHBOARD_PASSWORD)'),
  DASHBOARD_PASSWORD: optionalString('basic auth password for /admin/queues'),
  DASHBOARD_TOKEN: optionalString('bearer token for /admin/queues'),
  DASHBOARD_READONLY: bool(false, 'dashboard without retry/remove buttons').meta(ADVANCED),
};
