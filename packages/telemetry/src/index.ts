import type { EventEmitter } from 'node:events';
import {
  context,
  createContextKey,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type ContextManager,
  type Link,
  type Span,
  type TextMapGetter,
  type TextMapPropagator,
  type TextMapSetter,
  type Tracer,
} from '@opentelemetry/api';
// Types only, erased from the build: the SDK is loaded when tracing starts (startTracing).
import type { TracerProvider } from '@opentelemetry/sdk-trace';

/**
 * OpenTelemetry traces, off until configured with the standard variables, and the one module that
 * speaks to `@opentelemetry/*`: the apps see only `Tracing` and `TraceSpan`. Off (no
 * OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), `startTracing` returns
 * undefined without loading the SDK, and callers skip every tracing step on that undefined.
 * docs/tracing.md lists the variables, the spans and their attributes.
 */

/** Where a span sits in a trace; opaque to the apps. */
export type TraceContext = Context;
/** A trace context as text: W3C `traceparent` (and `tracestate`), as in HTTP headers and a queued request. */
type TraceCarrier = Record<string, string>;
export type SpanAttributes = Attributes;

interface SpanOptions {
  /** The span's parent; a fresh trace when absent. */
  parent?: TraceContext;
  kind?: 'server' | 'producer' | 'consumer' | 'internal';
  /** Epoch ms; now when absent. */
  startTime?: number;
  attributes?: SpanAttributes;
  /** Spans this one is about besides its parent: the requests a shared model call ran. */
  links?: TraceContext[];
}

const KINDS = {
  server: SpanKind.SERVER,
  producer: SpanKind.PRODUCER,
  consumer: SpanKind.CONSUMER,
  internal: SpanKind.INTERNAL,
};

/** One span: ended once, by whoever started it. */
export class TraceSpan {
  constructor(
    private readonly span: Span,
    /** The context whose current span this is: the parent of its children. */
    readonly context: TraceContext,
  ) {}

  rename(name: string): void {
    this.span.updateName(name);
  }

  set(attributes: SpanAttributes): void {
    this.span.setAttributes(attributes);
  }

  fail(message: string): void {
    this.span.setStatus({ code: SpanStatusCode.ERROR, message });
  }

  /** `at`: epoch ms; now when absent. */
  end(at?: number): void {
    this.span.end(at);
  }
}

/** A value a request's spans share through the active context (e.g. the span that ends with its answer). */
export const contextKey = (name: string) => createContextKey(name);

export interface Tracing {
  span(name: string, options?: SpanOptions): TraceSpan;
  /** The context a carrier names (a client's `traceparent`, a queued request's); a fresh one when it names none. */
  extract(carrier: Record<string, string | string[] | undefined>): TraceContext;
  /** The carrier that continues `ctx` in another process. */
  inject(ctx: TraceContext): TraceCarrier;
  /** The context of the code running now (AsyncLocalStorage). */
  active(): TraceContext;
  /** Runs `fn` with `ctx` active, and with it every callback it schedules. */
  run<T>(ctx: TraceContext, fn: () => T): T;
  /** Every listener of `emitter` runs with `ctx` active: a request's body arrives in its stream's own callbacks. */
  bind(ctx: TraceContext, emitter: EventEmitter): void;
  /** Sends the spans ended so far and stops: called as the process stops. */
  shutdown(): Promise<void>;
}

const headerGetter: TextMapGetter<Record<string, string | string[] | undefined>> = {
  get: (carrier, key) => carrier[key],
  keys: (carrier) => Object.keys(carrier),
};
const carrierSetter: TextMapSetter<TraceCarrier> = {
  set: (carrier, key, value) => {
    carrier[key] = value;
  },
};

/** Why tracing cannot start as configured. */
export class TracingConfigError extends Error {}

/**
 * Starts tracing for a service when an OTLP endpoint is configured; undefined (and nothing loaded)
 * otherwise. `service` names it where OTEL_SERVICE_NAME does not.
 */
export async function startTracing(
  service: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<Tracing | undefined> {
  if (!exporting(env)) return undefined;
  // Loaded only now: with tracing off the SDK is neither loaded nor started.
  const [provider, { AsyncLocalStorageContextManager }, core] = await Promise.all([
    tracerProvider(service, env),
    import('@opentelemetry/context-async-hooks'),
    import('@opentelemetry/core'),
  ]);
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  return tracingWith(provider, contextManager, new core.W3CTraceContextPropagator());
}

/** Whether traces are to be exported: an OTLP endpoint is set, and tracing is not turned off. */
function exporting(env: NodeJS.ProcessEnv): boolean {
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!endpoint || env.OTEL_SDK_DISABLED === 'true' || env.OTEL_TRACES_EXPORTER === 'none') return false;
  const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL;
  if (protocol && protocol !== 'http/json') {
    throw new TracingConfigError(
      `OTEL_EXPORTER_OTLP_PROTOCOL=${protocol}: tserve exports traces as OTLP over HTTP in JSON only; set it to http/json or leave it unset`,
    );
  }
  return true;
}

/**
 * The SDK's tracer provider for `service`: sampled as OTEL_TRACES_SAMPLER says, its spans sent to the
 * OTLP endpoint in batches as the OTEL_BSP_* variables say.
 */
async function tracerProvider(service: string, env: NodeJS.ProcessEnv): Promise<TracerProvider> {
  const [
    { TracerProvider, BatchSpanProcessor },
    { OTLPTraceExporter },
    { detectResources, envDetector, resourceFromAttributes },
  ] = await Promise.all([
    import('@opentelemetry/sdk-trace'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/resources'),
  ]);
  const sampler = await samplerFrom(env);
  const number = (name: string) => {
    const value = env[name];
    return value === undefined || value === '' ? undefined : Number(value);
  };
  return new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': service }).merge(detectResources({ detectors: [envDetector] })),
    sampler,
    spanProcessors: [
      new BatchSpanProcessor({
        exporter: new OTLPTraceExporter(),
        scheduledDelayMillis: number('OTEL_BSP_SCHEDULE_DELAY'),
        maxQueueSize: number('OTEL_BSP_MAX_QUEUE_SIZE'),
        maxExportBatchSize: number('OTEL_BSP_MAX_EXPORT_BATCH_SIZE'),
        exportTimeoutMillis: number('OTEL_BSP_EXPORT_TIMEOUT'),
      }),
    ],
  });
}

/** The apps' `Tracing`, on the SDK's provider, the process's context manager and the W3C propagator. */
function tracingWith(provider: TracerProvider, contextManager: ContextManager, propagator: TextMapPropagator): Tracing {
  const tracer: Tracer = provider.getTracer('tserve');
  return {
    span(name, options = {}) {
      const parent = options.parent ?? ROOT_CONTEXT;
      const links: Link[] = [];
      for (const linked of options.links ?? []) {
        const spanContext = trace.getSpanContext(linked);
        if (spanContext) links.push({ context: spanContext });
      }
      const span = tracer.startSpan(
        name,
        {
          kind: KINDS[options.kind ?? 'internal'],
          startTime: options.startTime,
          attributes: options.attributes,
          links,
        },
        parent,
      );
      return new TraceSpan(span, trace.setSpan(parent, span));
    },
    extract(carrier) {
      return propagator.extract(ROOT_CONTEXT, carrier, headerGetter);
    },
    inject(ctx) {
      const carrier: TraceCarrier = {};
      propagator.inject(ctx, carrier, carrierSetter);
      return carrier;
    },
    active: () => context.active(),
    run: (ctx, fn) => context.with(ctx, fn),
    bind(ctx, emitter) {
      contextManager.bind(ctx, emitter);
    },
    async shutdown() {
      await provider.shutdown();
      context.disable();
    },
  };
}

/** The sampler OTEL_TRACES_SAMPLER names (the specification's values), parent-based always-on by default. */
async function samplerFrom(env: NodeJS.ProcessEnv) {
  const { AlwaysOffSampler, AlwaysOnSampler, ParentBasedSampler, TraceIdRatioBasedSampler } =
    await import('@opentelemetry/sdk-trace');
  const name = env.OTEL_TRACES_SAMPLER || 'parentbased_always_on';
  const ratio = () => {
    const arg = env.OTEL_TRACES_SAMPLER_ARG;
    const value = arg === undefined || arg === '' ? 1 : Number(arg);
    if (!(value >= 0 && value <= 1))
      throw new TracingConfigError(`OTEL_TRACES_SAMPLER_ARG=${arg}: a ratio from 0 to 1`);
    return new TraceIdRatioBasedSampler(value);
  };
  switch (name) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return ratio();
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio() });
    default:
      throw new TracingConfigError(
        `OTEL_TRACES_SAMPLER=${name}: one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio`,
      );
  }
}
export { createLogger, downloadBar, readableMessage } from './logs.js';
