/**
 * Issue 47, traces: with an OTLP endpoint configured, a request that comes with a W3C `traceparent`
 * gives one trace across the gateway and the worker (the server span, admission, the trip through
 * the queue, the queue wait, the inference with its batch's attributes, post-processing and the
 * answer); a model call that ran several requests links them all. With no OTEL variables, nothing
 * is exported. The OTLP/HTTP receiver is a plain HTTP server here, reading the exporter's JSON.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { queueNameFor } from '@tserve/queue';
import type { JobData } from '@tserve/contract';
import { TestSystem, REDIS_URL, uniquePrefix, waitFor, type Proc } from './helpers/system.ts';
import { grpcClient, texts, unary } from './helpers/grpc.ts';
import { CLASSIFIER as MODEL } from './helpers/replicas.ts';

interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, unknown>;
  links: Array<{ traceId: string; spanId: string }>;
  error: boolean;
}

type AnyValue = { stringValue?: string; intValue?: string | number; doubleValue?: number; boolValue?: boolean };

function valueOf(v: AnyValue): unknown {
  if (v.intValue !== undefined) return Number(v.intValue);
  return v.stringValue ?? v.doubleValue ?? v.boolValue;
}

function attributesOf(list: Array<{ key: string; value: AnyValue }> = []): Record<string, unknown> {
  return Object.fromEntries(list.map(({ key, value }) => [key, valueOf(value)]));
}

/** An OTLP/HTTP trace receiver: every export request it gets, and the spans of those on /v1/traces. */
class Receiver {
  readonly spans: ReceivedSpan[] = [];
  requests = 0;
  private readonly server: http.Server;
  private readonly waiters = new Set<() => void>();

  constructor() {
    this.server = http.createServer((req, res) => {
      this.requests++;
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (req.url === '/v1/traces' && req.headers['content-type']?.includes('json'))
          this.read(JSON.parse(Buffer.concat(chunks).toString()));
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        for (const wake of this.waiters) wake();
      });
    });
  }

  async listen(port = 0): Promise<string> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, '127.0.0.1', resolve);
    });
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  /** Resolves with `probe`'s value once spans that satisfy it have arrived. */
  until<T>(what: string, probe: () => T | undefined, timeoutMs = 30_000): Promise<T> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const value = probe();
        if (value === undefined) return;
        this.waiters.delete(check);
        clearTimeout(timer);
        resolve(value);
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(
          new Error(
            `timed out waiting for ${what}; received: ${this.spans.map((s) => `${s.service}:${s.name}`).join(', ')}`,
          ),
        );
      }, timeoutMs);
      this.waiters.add(check);
      check();
    });
  }

  trace(traceId: string): ReceivedSpan[] {
    return this.spans.filter((s) => s.traceId === traceId);
  }

  private read(body: any): void {
    for (const rs of body.resourceSpans ?? []) {
      const service = String(attributesOf(rs.resource?.attributes)['service.name']);
      for (const ss of rs.scopeSpans ?? []) {
        for (const s of ss.spans ?? []) {
          this.spans.push({
            service,
            traceId: s.traceId,
            spanId: s.spanId,
            parentSpanId: s.parentSpanId ?? '',
            name: s.name,
            kind: s.kind,
            attributes: attributesOf(s.attributes),
            links: (s.links ?? []).map((l: any) => ({ traceId: l.traceId, spanId: l.spanId })),
            error: s.status?.code === 2,
          });
        }
      }
    }
  }
}

const traceparent = () => {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, header: `00-${traceId}-${spanId}-01` };
};

const one = (spans: ReceivedSpan[], service: string, name: string) =>
  spans.find((s) => s.service === service && s.name === name);

describe('traces', () => {
  const receiver = new Receiver();
  let system: TestSystem;
  let worker: Proc;

  before(async () => {
    const endpoint = await receiver.listen();
    // The worker is held stopped (SIGSTOP) below: a long TTL keeps the gateway counting on it meanwhile.
    system = new TestSystem(uniquePrefix('traces'), REDIS_URL, {
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
      OTEL_BSP_SCHEDULE_DELAY: 50,
      WORKER_TTL_MS: 120_000,
    });
    await system.startGateway();
    worker = system.startWorker({ model: MODEL });
    await system.waitForWorkers(MODEL);
  });
  after(async () => {
    worker.kill('SIGCONT');
    await system.stop();
    await receiver.close();
  });

  it("continues a client's traceparent through the gateway and the worker, with the batch's attributes", async () => {
    const client = traceparent();
    const res = await system.post(
      `/models/${MODEL}`,
      { inputs: 'a trace through every process' },
      { traceparent: client.header },
    );
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const names = [
      'POST /models/*id',
      'tserve.admission',
      'tserve.queue',
      'tserve.answer',
      'tserve.queue_wait',
      'tserve.inference',
      'tserve.postprocess',
      'tserve.batch',
    ];
    const spans = await receiver.until('every span of the trace', () => {
      const spans = receiver.trace(client.traceId);
      return names.every((name) => spans.some((s) => s.name === name)) ? spans : undefined;
    });

    const server = one(spans, 'tserve-gateway', 'POST /models/*id')!;
    assert.equal(server.parentSpanId, client.spanId, 'the server span continues the client span');
    assert.equal(server.kind, 2, 'SPAN_KIND_SERVER');
    assert.equal(server.attributes['http.response.status_code'], 200);
    assert.equal(server.attributes['tserve.request_id'], res.headers.get('x-request-id'));
    for (const name of ['tserve.admission', 'tserve.queue', 'tserve.answer'])
      assert.equal(one(spans, 'tserve-gateway', name)?.parentSpanId, server.spanId, name);
    const trip = one(spans, 'tserve-gateway', 'tserve.queue')!;
    assert.equal(trip.attributes['tserve.batch.size'], 1);

    // The worker's spans hang under the gateway's trip: the context travelled in the job.
    const wait = one(spans, 'tserve-worker', 'tserve.queue_wait')!;
    const inference = one(spans, 'tserve-worker', 'tserve.inference')!;
    const batch = one(spans, 'tserve-worker', 'tserve.batch')!;
    const post = one(spans, 'tserve-worker', 'tserve.postprocess')!;
    for (const span of [wait, inference, batch]) assert.equal(span.parentSpanId, trip.spanId, span.name);
    assert.equal(post.parentSpanId, inference.spanId);
    for (const span of [batch, inference]) {
      assert.equal(span.attributes['tserve.batch.size'], 1, span.name);
      assert.equal(span.attributes['tserve.batch.requests'], 1, span.name);
      assert.ok((span.attributes['tserve.batch.padded_tokens'] as number) >= 5, `${span.name}: padded tokens`);
      assert.ok((span.attributes['tserve.batch.model_ms'] as number) > 0, `${span.name}: model call time`);
    }
    assert.deepEqual(batch.links, [{ traceId: client.traceId, spanId: trip.spanId }]);
    assert.ok(spans.every((s) => !s.error));
  });

  it('traces a protocol route the same way (KServe v2, through the shared model call)', async () => {
    const client = traceparent();
    const res = await system.post(
      `/v2/models/${MODEL}/infer`,
      { inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['a protocol route, traced'] }] },
      { traceparent: client.header },
    );
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const spans = await receiver.until('the server, trip and inference spans', () => {
      const spans = receiver.trace(client.traceId);
      return ['tserve.queue', 'tserve.inference', 'tserve.answer'].every((name) =>
        spans.some((s) => s.name === name),
      ) && spans.some((s) => s.kind === 2)
        ? spans
        : undefined;
    });
    const server = spans.find((s) => s.kind === 2)!;
    assert.equal(server.name, 'POST /v2/models/*path');
    assert.equal(server.parentSpanId, client.spanId);
    assert.equal(
      one(spans, 'tserve-gateway', 'tserve.queue')?.parentSpanId,
      server.spanId,
      'the request path saw the server span as current',
    );
  });

  it('traces a gRPC call the same way, continuing the traceparent of its metadata', async () => {
    const client = traceparent();
    const stub = grpcClient('inference.GRPCInferenceService', system.grpcPort);
    await unary(
      stub,
      'ModelInfer',
      { model_name: MODEL, inputs: [texts('a gRPC call, traced')] },
      { metadata: { traceparent: client.header } },
    );
    stub.close();
    const spans = await receiver.until('the gRPC server span, the trip and the inference', () => {
      const spans = receiver.trace(client.traceId);
      return ['tserve.queue', 'tserve.inference'].every((name) => spans.some((s) => s.name === name)) &&
        spans.some((s) => s.kind === 2)
        ? spans
        : undefined;
    });
    const server = spans.find((s) => s.kind === 2)!;
    assert.equal(server.name, 'inference.GRPCInferenceService/ModelInfer');
    assert.equal(server.parentSpanId, client.spanId);
    assert.equal(server.attributes['rpc.system'], 'grpc');
    assert.equal(one(spans, 'tserve-gateway', 'tserve.queue')?.parentSpanId, server.spanId);
    assert.equal(
      one(spans, 'tserve-worker', 'tserve.inference')?.parentSpanId,
      one(spans, 'tserve-gateway', 'tserve.queue')?.spanId,
    );
  });

  it('links every request a model call ran, each in its own trace', async () => {
    const admin = new Redis(REDIS_URL);
    const queue = new Queue(queueNameFor(MODEL), { connection: admin, prefix: system.prefix, skipMetasUpdate: true });
    const clients = Array.from({ length: 4 }, traceparent);
    // Held while the requests are queued, the worker then takes them all into one batch.
    worker.kill('SIGSTOP');
    let answers;
    try {
      const sent = clients.map((c, i) =>
        system.post(`/models/${MODEL}`, { inputs: `request ${i} shares a model call` }, { traceparent: c.header }),
      );
      await waitFor('4 requests queued', async () => {
        const jobs = await queue.getWaiting();
        return jobs.reduce((n, job) => n + (job.data as JobData).requests.length, 0) === 4;
      });
      worker.kill('SIGCONT');
      answers = await Promise.all(sent);
    } finally {
      worker.kill('SIGCONT');
      await queue.close();
      admin.disconnect();
    }
    for (const a of answers) assert.equal(a.status, 200, JSON.stringify(a.body));

    const inferences = await receiver.until('each request’s inference span', () => {
      const found = clients.map((c) => one(receiver.trace(c.traceId), 'tserve-worker', 'tserve.inference'));
      return found.every(Boolean) ? found : undefined;
    });
    for (const span of inferences) assert.equal(span!.attributes['tserve.batch.requests'], 4);
    const ours = new Set(clients.map((c) => c.traceId));
    const batch = await receiver.until('the shared batch span', () =>
      receiver.spans.find(
        (s) => s.name === 'tserve.batch' && ours.has(s.traceId) && s.attributes['tserve.batch.requests'] === 4,
      ),
    );
    assert.equal(batch.attributes['tserve.batch.size'], 4);
    assert.deepEqual(new Set(batch.links.map((l) => l.traceId)), ours, 'linked to every request it ran');
    // The gateway exports on its own schedule: its trip spans may come after the worker's.
    const trips = await receiver.until('each request’s trip span', () => {
      const found = clients.map((c) => one(receiver.trace(c.traceId), 'tserve-gateway', 'tserve.queue'));
      return found.every(Boolean) ? found : undefined;
    });
    for (const trip of trips) {
      assert.ok(
        batch.links.some((l) => l.spanId === trip!.spanId),
        'the link names the request’s trip span',
      );
    }
  });
});

describe('traces off', () => {
  it('exports nothing without OTEL variables, even as the processes stop and would flush', async () => {
    // An SDK started anyway would send to the default endpoint, localhost:4318: the receiver waits there.
    const receiver = new Receiver();
    await receiver.listen(4318);
    const system = new TestSystem(uniquePrefix('traces-off'), REDIS_URL, {
      OTEL_SERVICE_NAME: 'tserve-off',
      OTEL_BSP_SCHEDULE_DELAY: 50,
    });
    try {
      const gateway = await system.startGateway();
      const worker = system.startWorker({ model: MODEL });
      await system.waitForWorkers(MODEL);
      const res = await system.post(
        `/models/${MODEL}`,
        { inputs: 'not traced' },
        { traceparent: traceparent().header },
      );
      assert.equal(res.status, 200, JSON.stringify(res.body));
      // A graceful stop shuts a tracer provider down, which exports whatever it still holds.
      assert.equal(await worker.stop('SIGTERM'), 0);
      assert.equal(await gateway.stop('SIGTERM'), 0);
      assert.equal(receiver.requests, 0);
    } finally {
      await system.stop();
      await receiver.close();
    }
  });
});
