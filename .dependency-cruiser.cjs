// The layering rule: apps are leaves that may import packages/*, never each other; packages never
// import apps; BullMQ stays behind each app's transport/ and gRPC behind the gateway's grpc/; the gateway's rooms import only the stages
// before theirs; and no module imports itself back through others.
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'app-imports-app',
      comment: 'An app imports another app; share the code through a package under packages/.',
      severity: 'error',
      from: { path: '^apps/([^/]+)/' },
      to: { path: '^apps/', pathNot: '^apps/$1/' },
    },
    {
      name: 'package-imports-app',
      comment: 'A package imports an app; packages are what apps are built from, never the reverse.',
      severity: 'error',
      from: { path: '^packages/' },
      to: { path: '^apps/' },
    },
    {
      name: 'bullmq-outside-transport',
      comment:
        "BullMQ is imported outside an app's transport/ folder; the transport is the one module on it (docs/protocol.md): add what you need to its API.",
      severity: 'error',
      from: { path: '^(apps|packages)/[^/]+/src/', pathNot: '^apps/[^/]+/src/transport/' },
      to: { path: 'node_modules/bullmq/' },
    },
    {
      name: 'grpc-outside-the-grpc-server',
      comment:
        "@grpc/* and grpc-health-check are imported outside the gateway's grpc/ room; its server is the one module on them: a protocol's gRPC service is plain handlers (GrpcService).",
      severity: 'error',
      from: { path: '^(apps|packages)/[^/]+/src/', pathNot: '^apps/gateway/src/grpc/' },
      to: { path: 'node_modules/(@grpc/|grpc-health-check/)' },
    },
    {
      name: 'tiktoken-outside-openai-tokens',
      comment:
        "js-tiktoken is imported outside the gateway's protocols/openai-tokens.ts, the one module on it: OpenAI's token ids are read into text there.",
      severity: 'error',
      from: { path: '^(apps|packages)/[^/]+/src/', pathNot: '^apps/gateway/src/protocols/openai-tokens\\.ts$' },
      to: { path: 'node_modules/js-tiktoken/' },
    },
    {
      name: 'logger-built-outside-logs',
      comment:
        'pino (but for its types) and pino-pretty are imported outside packages/telemetry/src/logs.ts; loggers are built there alone, so that every process logs alike: use createLogger.',
      severity: 'error',
      from: { path: '^(apps|packages)/[^/]+/src/', pathNot: '^packages/telemetry/src/logs\\.ts$' },
      to: { path: 'node_modules/(pino|pino-pretty)/', dependencyTypesNot: ['type-only'] },
    },
    // The gateway's rooms, by the stage of a request's trip (docs/architecture.md, "Gateway").
    {
      name: 'gateway-http-imports-a-room',
      comment: 'http/ is what every stage stands on (the server, errors, request ids); it imports no other room.',
      severity: 'error',
      from: { path: '^apps/gateway/src/http/' },
      to: { path: '^apps/gateway/src/(protocols|admission|serving|transport|ops|cli|grpc|offline)/' },
    },
    {
      name: 'gateway-grpc-imports-a-room',
      comment:
        "grpc/ is the gRPC server, as http/ is HTTP's: it imports no other room; protocols hand it their services.",
      severity: 'error',
      from: { path: '^apps/gateway/src/grpc/' },
      to: { path: '^apps/gateway/src/(http|protocols|admission|serving|transport|ops|cli|offline)/' },
    },
    {
      name: 'gateway-protocol-imports-a-protocol',
      comment:
        "A protocol imports another protocol, or ops/; what two protocols share lives in serving/, a protocol's own helpers carry its name (kserve-binary.ts).",
      severity: 'error',
      from: { path: '^apps/gateway/src/protocols/([a-z]+)' },
      to: { path: '^apps/gateway/src/(protocols|ops)/', pathNot: '^apps/gateway/src/protocols/$1[.-]' },
    },
    {
      name: 'gateway-admission-imports-a-later-stage',
      comment:
        'admission/ decides whether a request may enter; it knows nothing of protocols, serving, the transport or ops.',
      severity: 'error',
      from: { path: '^apps/gateway/src/admission/' },
      to: { path: '^apps/gateway/src/(protocols|serving|transport|ops|cli|grpc|offline)/' },
    },
    {
      name: 'gateway-serving-imports-protocols-or-ops',
      comment: 'serving/ answers every protocol alike, and ops/ reads it, never the reverse.',
      severity: 'error',
      from: { path: '^apps/gateway/src/serving/' },
      to: { path: '^apps/gateway/src/(protocols|ops|cli|grpc|offline)/' },
    },
    {
      name: 'gateway-transport-imports-a-room',
      comment: 'transport/ is the one module on BullMQ; it imports no room but http/.',
      severity: 'error',
      from: { path: '^apps/gateway/src/transport/' },
      to: { path: '^apps/gateway/src/(protocols|admission|serving|ops|cli|grpc|offline)/' },
    },
    {
      name: 'gateway-offline-imports-a-room',
      comment:
        "offline/ keeps the Batch API's files and batches and runs their lines through the gateway's own HTTP routes, as a client would; it imports no other room.",
      severity: 'error',
      from: { path: '^apps/gateway/src/offline/' },
      to: { path: '^apps/gateway/src/(http|protocols|admission|serving|transport|ops|cli|grpc)/' },
    },
    {
      name: 'gateway-room-imports-the-root',
      comment: 'main.ts, gateway.ts and app.ts build the gateway from the rooms; a room never imports them.',
      severity: 'error',
      from: { path: '^apps/gateway/src/[^/]+/' },
      to: { path: '^apps/gateway/src/[^/]+\\.ts$' },
    },
    // The worker's rooms (docs/architecture.md, "Worker").
    {
      name: 'worker-model-imports-a-room',
      comment: 'model/ loads and runs the model; it knows nothing of tasks, batches or the transport.',
      severity: 'error',
      from: { path: '^apps/worker/src/model/' },
      to: { path: '^apps/worker/src/(tasks|pipeline|transport)/' },
    },
    {
      name: 'worker-task-imports-the-pipeline',
      comment: 'A task shapes one model call; batching and the transport are not its business.',
      severity: 'error',
      from: { path: '^apps/worker/src/tasks/' },
      to: { path: '^apps/worker/src/(pipeline|transport)/' },
    },
    {
      name: 'worker-pipeline-imports-the-transport',
      comment:
        'The pipeline declares what it needs of the transport (TakenJobs, in pipeline/jobs.ts), types included; startup/ hands it the transport.',
      severity: 'error',
      from: { path: '^apps/worker/src/pipeline/' },
      to: { path: '^apps/worker/src/transport/' },
    },
    {
      name: 'worker-transport-imports-a-room',
      comment:
        "transport/ imports no other room of the worker, types included: it meets the pipeline's declared types by their shape, and startup/ hands one to the other.",
      severity: 'error',
      from: { path: '^apps/worker/src/transport/' },
      to: { path: '^apps/worker/src/(model|tasks|pipeline)/' },
    },
    {
      name: 'worker-room-imports-the-root',
      comment: 'main.ts and startup/ build the worker from the rooms; a room never imports them.',
      severity: 'error',
      from: { path: '^apps/worker/src/(model|tasks|pipeline|transport)/' },
      to: { path: '^apps/worker/src/([^/]+\\.ts$|startup/)' },
    },
    {
      name: 'no-cycle',
      comment: 'An import cycle; break it by moving what both sides need into a module of its own.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'unresolvable',
      comment: 'An import that resolves to nothing (a rule above cannot judge what it cannot find).',
      severity: 'error',
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    // Build output is a leaf: an import of @tserve/<app> lands in apps/<app>/dist and is judged there.
    doNotFollow: { path: ['node_modules', '(^|/)dist/'] },
    // Workspace packages resolve to their sources (tsconfig.eslint.json's paths), so the check
    // needs no build.
    tsConfig: { fileName: 'tsconfig.eslint.json' },
    tsPreCompilationDeps: true,
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
    },
  },
};
