/**
 * Issue 8: no client can take the gateway down. Against a live system under steady load, a bounded
 * mix of hostile clients: 1 ms and random deadlines, disconnects mid-body and mid-wait, slow-drip
 * headers and bodies, malformed JSON and UTF-8, huge headers, unknown routes and methods, and a
 * flood of connections (against a gateway of its own with a small MAX_CONNECTIONS). After the mix
 * the gateway is the same process, answers, serves a normal request, never leaked a stack trace,
 * logged no unhandled rejection, and its memory is back near where it began.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { metricValue, MODEL_DIR, Proc, ROOT, TestSystem, uniquePrefix, waitFor } from './helpers/system.ts';
import { CLASSIFIER as MODEL, EMBEDDER, QA } from './helpers/replicas.ts';
import { Redis } from 'ioredis';
import { OUTCOME_MESSAGE_MAX_BYTES } from '@tserve/contract';
import { queueNameFor } from '@tserve/queue';

const HEADERS_TIMEOUT_MS = 1000;
const REQUEST_TIMEOUT_MS = 2000;
/** A stack frame or a source path in a body: what an error must never show a client. */
const LEAK = /\bat \S+ \(|\.(ts|js):\d+:\d+|node_modules|\/work\//;

const rssMiB = (pid: number) =>
  Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

/** Writes raw bytes on a fresh connection; resolves with what came back once the server closed it (or `after` ms). */
function raw(
  port: number,
  chunks: Array<string | Buffer | { waitMs: number } | { until: Promise<unknown> }>,
  options: { destroyAfterWrite?: boolean; maxMs?: number } = {},
): Promise<{ text: string; closedAfterMs: number; closedByServer: boolean }> {
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = net.connect(port, '127.0.0.1');
    let text = '';
    let done = false;
    const finish = (byServer: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(limit);
      socket.destroy();
      resolve({ text, closedAfterMs: Date.now() - started, closedByServer: byServer });
    };
    const limit = setTimeout(() => finish(false), options.maxMs ?? 15_000);
    socket.on('data', (d) => (text += d.toString('latin1')));
    socket.on('close', () => finish(true));
    socket.on('error', () => finish(true));
    // eslint-disable-next-line @typescript-eslint/no-misused-promises -- writes and waits only; nothing in it rejects
    socket.on('connect', async () => {
      for (const chunk of chunks) {
        if (done || socket.destroyed) return;
        if (typeof chunk === 'object' && 'waitMs' in chunk) await new Promise((r) => setTimeout(r, chunk.waitMs));
        else if (typeof chunk === 'object' && 'until' in chunk) await chunk.until;
        else socket.write(chunk);
      }
      if (options.destroyAfterWrite) finish(false);
    });
  });
}

/** A request on `agent`'s connection; resolves with the status and body. */
function viaAgent(
  agent: http.Agent,
  port: number,
  pathname: string,
  body?: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path: pathname,
        method: body === undefined ? 'GET' : 'POST',
        agent,
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const request = (path: string, body: string, headers: Record<string, string> = {}) => {
  const all = {
    host: 'x',
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(body)),
    ...headers,
  };
  return `POST ${path} HTTP/1.1\r\n${Object.entries(all)
    .map(([k, v]) => `${k}: ${v}`)
    .join('\r\n')}\r\n\r\n${body}`;
};

describe('hostile clients', () => {
  const system = new TestSystem(uniquePrefix('hostile'));
  let gateway: Proc;

  before(async () => {
    gateway = await system.startGateway({
      HTTP_HEADERS_TIMEOUT_MS: HEADERS_TIMEOUT_MS,
      HTTP_REQUEST_TIMEOUT_MS: REQUEST_TIMEOUT_MS,
      LOG_LEVEL: 'info',
    });
    system.startWorker({ model: MODEL });
    await system.waitForWorkers(MODEL);
  });
  after(() => system.stop());

  it('answers the 1 ms deadline that used to crash it with 504, and lives on', async () => {
    for (const headers of [{ 'x-request-timeout-ms': '1' }, {}] as Array<Record<string, string>>) {
      const body =
        'x-request-timeout-ms' in headers ? 'hi' : JSON.stringify({ inputs: 'hi', options: { timeout_ms: 1 } });
      const res = await fetch(`${system.url}/${'x-request-timeout-ms' in headers ? '' : `models/${MODEL}`}`, {
        method: 'POST',
        headers: { 'content-type': 'x-request-timeout-ms' in headers ? 'text/plain' : 'application/json', ...headers },
        body,
      });
      assert.ok([200, 504].includes(res.status), `status ${res.status}`);
      if (res.status === 504) assert.equal(((await res.json()) as { error_type: string }).error_type, 'timeout');
    }
    assert.ok(gateway.running);
  });

  it('survives a bounded mix of hostile clients under load, and is the same healthy process after', async () => {
    const pid = gateway.pid;
    const url = system.url;
    const port = Number(new URL(url).port);
    const valid = JSON.stringify({ inputs: 'a perfectly normal request' });
    // Warm up first, so that the memory baseline is the working size, not a cold start.
    for (let i = 0; i < 200; i++) await system.infer(MODEL, `warm up ${i}`);
    const rssBefore = rssMiB(pid);

    let loading = true;
    const normal: number[] = [];
    const load = Promise.all(
      Array.from({ length: 4 }, async (_, c) => {
        for (let i = 0; loading; i++) normal.push((await system.infer(MODEL, `steady load ${c} ${i}`)).status);
      }),
    );

    const bodies: string[] = [];
    const JSON_TYPE = { 'content-type': 'application/json' };
    /** Sends one request and keeps the body of its answer. */
    const send = (pathname: string, init: RequestInit) => async () =>
      bodies.push(await (await fetch(`${url}${pathname}`, { method: 'POST', ...init })).text());
    const randomMs = () => String(1 + Math.floor(Math.random() * 40));
    const hostile: Array<() => Promise<unknown>> = [
      // Deadlines: 1 ms and random, by header and by body.
      send('/', { headers: { 'x-request-timeout-ms': '1' }, body: 'hi' }),
      async () =>
        send(`/models/${MODEL}`, {
          headers: JSON_TYPE,
          body: JSON.stringify({ inputs: 'x', options: { timeout_ms: Number(randomMs()) } }),
        })(),
      async () =>
        send(`/models/${MODEL}`, { headers: { ...JSON_TYPE, 'x-request-timeout-ms': randomMs() }, body: valid })(),
      // Disconnects mid-body and mid-wait.
      () => raw(port, [request(`/models/${MODEL}`, valid).slice(0, -10)], { destroyAfterWrite: true }),
      () =>
        raw(port, [request(`/models/${MODEL}`, valid), { waitMs: Math.floor(Math.random() * 5) }], {
          destroyAfterWrite: true,
        }),
      async () => {
        const controller = new AbortController();
        const pending = fetch(`${url}/models/${MODEL}`, {
          method: 'POST',
          headers: JSON_TYPE,
          body: valid,
          signal: controller.signal,
        }).catch(() => undefined);
        setTimeout(() => controller.abort(), Math.floor(Math.random() * 10));
        await pending;
      },
      // Malformed JSON, invalid UTF-8, wrong types.
      send(`/models/${MODEL}`, { headers: JSON_TYPE, body: '{"inputs": [1, 2' }),
      send(`/models/${MODEL}`, {
        headers: JSON_TYPE,
        body: Buffer.from([0x7b, 0x22, 0x69, 0x22, 0x3a, 0x22, 0xc3, 0x28, 0x22, 0x7d]),
      }),
      send('/', { body: Buffer.from([0xff, 0xfe, 0xfd]) }),
      send(`/models/${MODEL}`, { headers: JSON_TYPE, body: '{"inputs": {"__proto__": {"x": 1}}, "parameters": null}' }),
      // Huge headers, unknown routes and methods.
      async () =>
        bodies.push(
          (await raw(port, [`GET /health HTTP/1.1\r\nhost: x\r\nx-big: ${'a'.repeat(64 * 1024)}\r\n\r\n`])).text,
        ),
      send('/no/such/route', { body: '{}' }),
      send(`/models/${MODEL}`, { method: 'DELETE' }),
      async () => bodies.push((await raw(port, ['BREW /models HTTP/1.1\r\nhost: x\r\n\r\n'])).text),
      async () => bodies.push((await raw(port, ['\x16\x03\x01 not http at all\r\n\r\n'])).text),
    ];
    const mix = Array.from({ length: 300 }, (_, i) => hostile[i % hostile.length]);
    await Promise.all(
      Array.from({ length: 12 }, async (_, lane) => {
        for (let i = lane; i < mix.length; i += 12) await mix[i]();
      }),
    );

    // Slow senders are cut off by the server's own timeouts, not left holding connections.
    const [slowHeaders, slowBody] = await Promise.all([
      raw(port, [
        'POST / HTTP/1.1\r\n',
        ...Array.from({ length: 40 }, (_, i) => [{ waitMs: 250 }, `x-drip-${i}: 1\r\n`]).flat(),
      ]),
      raw(port, [
        request(`/models/${MODEL}`, `{"inputs": "${'a'.repeat(200)}"}`).slice(0, -200),
        ...Array.from({ length: 40 }, () => [{ waitMs: 250 }, 'a']).flat(),
      ]),
    ]);
    for (const [what, r, limit] of [
      ['headers', slowHeaders, HEADERS_TIMEOUT_MS],
      ['body', slowBody, REQUEST_TIMEOUT_MS],
    ] as const) {
      assert.ok(r.closedByServer, `a slow-drip ${what} was cut off by the server`);
      // Node checks these timeouts every connectionsCheckingInterval (a quarter of the headers timeout here).
      assert.ok(r.closedAfterMs < limit + 3000, `slow ${what} cut off after ${r.closedAfterMs} ms (limit ${limit} ms)`);
    }

    loading = false;
    await load;
    assert.ok(
      normal.length > 0 && normal.every((s) => s === 200),
      `the steady load was answered throughout: ${[...new Set(normal)].join(',')}`,
    );

    for (const body of bodies) assert.ok(!LEAK.test(body), `a body leaked internals: ${body.slice(0, 300)}`);
    assert.equal(gateway.pid, pid);
    assert.ok(gateway.running, `the gateway died:\n${gateway.output.slice(-2000)}`);
    assert.equal((await fetch(`${url}/health`)).status, 200);
    assert.equal((await system.infer(MODEL, 'after the storm')).status, 200);
    assert.ok(!/unhandled rejection/.test(gateway.output), 'no unhandled rejection was logged');
    // A leak check, not a speed check: generous, and given time for garbage collection.
    await waitFor(
      'gateway memory back near its start',
      async () => rssMiB(pid) < rssBefore * 1.5 + 30,
      20_000,
      500,
    ).catch(() => {
      throw new Error(`gateway RSS ${rssMiB(pid).toFixed(0)} MiB after, ${rssBefore.toFixed(0)} MiB before`);
    });
  });

  it('holds at most MAX_CONNECTIONS, closes the others as they arrive, and serves the connections it holds throughout', async () => {
    const CAP = 20;
    // A gateway of its own on this system's queues and worker, whose timeouts let the flood's idle connections stay.
    const capped = new TestSystem(system.prefix);
    const valid = JSON.stringify({ inputs: 'a client that connected before the flood' });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const flood: net.Socket[] = [];
    const endFlood = () => flood.splice(0).forEach((socket) => socket.destroy());
    try {
      const cappedGateway = await capped.startGateway({
        MAX_CONNECTIONS: CAP,
        HTTP_HEADERS_TIMEOUT_MS: 60_000,
        HTTP_REQUEST_TIMEOUT_MS: 60_000,
      });
      // /health says the process answers; it serves once it has seen the worker (/ready).
      await capped.waitForWorkers(MODEL);
      const first = await viaAgent(agent, capped.port, `/models/${MODEL}`, valid);
      assert.equal(first.status, 200, first.body);
      let closed = 0;
      for (let i = 0; i < CAP + 10; i++) {
        const socket = net.connect(capped.port, '127.0.0.1');
        socket.on('error', () => {});
        socket.on('close', () => closed++);
        flood.push(socket);
        await new Promise((connected) => socket.once('connect', connected).once('close', connected));
      }
      // At most CAP are held, the client's among them: at least the last ten were closed on arrival.
      await waitFor('connections beyond MAX_CONNECTIONS closed', async () => closed >= 10, 10_000);
      assert.equal(
        (await viaAgent(agent, capped.port, `/models/${MODEL}`, valid)).status,
        200,
        'a held connection is served during the flood',
      );
      const dropped = metricValue(
        (await viaAgent(agent, capped.port, '/metrics')).body,
        'tserve_connections_dropped_total',
      );
      assert.ok(dropped >= closed, `the metric counts the ${closed} connections closed on arrival: ${dropped}`);

      endFlood();
      await waitFor(
        'a new connection served once the flood is gone',
        async () => (await fetch(`${capped.url}/health`)).ok,
        10_000,
      );
      assert.ok(cappedGateway.running);
    } finally {
      endFlood();
      agent.destroy();
      await capped.gateway?.stop();
    }
  });

  it('holds at most MAX_BODIES_BYTES of request bodies, counted as received: one more that does not fit gets 503, and enters once they are answered', async () => {
    // A gateway of its own, with room for two bodies of about 20 KB.
    const held = new TestSystem(system.prefix);
    const body = JSON.stringify({ inputs: 'a '.repeat(10_000) });
    // What the two slow clients below have sent: bodies count as they are received, not as declared.
    const received = 2 * (body.length - 1);
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    try {
      await held.startGateway({ MAX_BODIES_BYTES: 2 * body.length, HTTP_REQUEST_TIMEOUT_MS: 60_000 });
      await held.waitForWorkers(MODEL);
      // Two clients send all of their bodies but the last byte, and hold it.
      // connection: close, so that each ends once it is answered.
      const whole = request(`/models/${MODEL}`, body, { connection: 'close' });
      const slow = [0, 1].map(() =>
        raw(held.port, [whole.slice(0, -1), { until: released }, whole.slice(-1)], { maxMs: 60_000 }),
      );
      const third = () =>
        fetch(`${held.url}/models/${MODEL}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      const bodyBytes = async () =>
        metricValue(await (await fetch(`${held.url}/metrics`)).text(), 'tserve_request_body_bytes_held');
      await waitFor('both bodies held', async () => (await bodyBytes()) === received, 10_000, 50);
      const refused = await third();
      assert.equal(refused.status, 503);
      assert.equal(refused.headers.get('retry-after'), '1');
      assert.match(
        ((await refused.json()) as { error: string }).error,
        /request bodies, its most \(MAX_BODIES_BYTES\)/,
      );
      release();
      for (const answer of await Promise.all(slow))
        assert.match(answer.text, /^HTTP\/1\.1 200 /, answer.text.slice(0, 300));
      await waitFor('nothing held once they are answered', async () => (await bodyBytes()) === 0, 10_000, 50);
      assert.equal((await third()).status, 200);
    } finally {
      release();
      await held.gateway?.stop();
    }
  });

  it('exits non-zero naming the port when the port is taken', async () => {
    const port = Number(new URL(system.url).port);
    const second = new Proc(
      'gateway on a busy port',
      spawn(process.execPath, [path.join(ROOT, 'apps/gateway/dist/main.js')], {
        env: {
          PATH: process.env.PATH,
          REDIS_URL: system.redisUrl,
          QUEUE_PREFIX: system.prefix,
          MODEL_DIR,
          PORT: String(port),
          HOST: '127.0.0.1',
          LOG_LEVEL: 'warn',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    );
    const code = await second.exited;
    assert.notEqual(code, 0);
    assert.match(second.output, new RegExp(`port ${port} on 127\\.0\\.0\\.1 is already in use`));
    assert.ok(!LEAK.test(second.output), second.output);
  });
});

describe('a request of the longest inputs', () => {
  // Tokenizing is synchronous on the worker's main thread, which also sends the heartbeat: a
  // worker that tokenized such a request in one go fell silent for seconds, so the gateway counted
  // it gone and sent the request again as a job (found with sixteen 1 MB requests at once).
  const system = new TestSystem(uniquePrefix('longest'));

  before(async () => {
    await system.startGateway({ MAX_BODY_BYTES: 4_000_000, RESULT_POLL_MS: 200, REQUEST_TIMEOUT_MS: 120_000 });
    for (const model of [MODEL, QA]) system.startWorker({ model, env: { HEARTBEAT_MS: 100, WORKER_TTL_MS: 1000 } });
    await system.waitForWorkers(MODEL);
    await system.waitForWorkers(QA);
  });
  after(() => system.stop());

  it('is answered once, by the worker that took it, which stays live while it tokenizes', async () => {
    // 64 inputs of 40,000 characters with nowhere a cut could stop early (no whitespace, no CJK
    // ideograph), so each is tokenized whole: about 2 s in all on a 2-core machine, tens of ms each.
    const inputs = Array.from({ length: 64 }, (_, i) => `${'a.'.repeat(20_000)}${i}`);
    const res = await system.infer(MODEL, inputs);
    assert.equal(res.status, 200, JSON.stringify(res.body).slice(0, 300));
    assert.equal((res.body as unknown[]).length, 64);
    assert.match(res.headers.get('x-warnings') ?? '', /truncated/);
    assert.equal(await system.metric('tserve_direct_requests_requeued_total'), 0, system.logs());
    assert.doesNotMatch(system.logs(), /sent again as a job|Missing lock/);
  });

  it('of many questions over long contexts, each read in dozens of windows, is answered once too', async () => {
    // Each context is read in about 60 windows, each window offers 210 candidate answers (top_k
    // 100), and each candidate is cut from its context: seconds of post-processing in all.
    const words = ['alpha', 'river', 'mountain', 'city', 'paris', 'music', 'science', 'history'];
    const context = Array.from({ length: 2600 }, (_, i) => words[(i * 7 + (i >> 3)) % words.length]).join(' ');
    const inputs = Array.from({ length: 16 }, (_, i) => ({ question: `where is river ${i}?`, context }));
    const res = await system.post(`/models/${QA}`, {
      inputs,
      parameters: { doc_stride: 320, top_k: 100, max_answer_len: 1000 },
    });
    assert.equal(res.status, 200, JSON.stringify(res.body).slice(0, 300));
    assert.deepEqual(
      (res.body as Array<Array<{ answer: string }>>).map((answers) => answers.length),
      inputs.map(() => 100),
    );
    assert.equal(await system.metric('tserve_direct_requests_requeued_total'), 0, system.logs());
    assert.doesNotMatch(system.logs(), /sent again as a job|Missing lock/);
  });
});

describe('answers of tens of megabytes', () => {
  const system = new TestSystem(uniquePrefix('large-answer'));

  before(async () => {
    await system.startGateway({ RESULT_POLL_MS: 600_000, REQUEST_TIMEOUT_MS: 30_000 });
    system.startWorker({ model: EMBEDDER });
    await system.waitForWorkers(EMBEDDER);
  });
  after(() => system.stop());

  // Ten inputs of 512 tokens with a vector per token: 1,966,080 numbers (MAX_ANSWER_VALUES is
  // 2,000,000), about 38 MB of JSON.
  const inputs = Array.from({ length: 10 }, (_, i) => `${'word '.repeat(600)}${i}`);
  // Redis closes a subscriber whose unread output passes 32 MB (client-output-buffer-limit pubsub):
  // an answer published whole would cut off the gateway's results channel, and every request then
  // waiting on it, until the fallback read a poll period later. Here that period is longer than
  // the deadline, so only an answer that comes by the results channel arrives in time.
  for (const priority of ['interactive', 'batch']) {
    it(`reaches its ${priority}-class client without losing the results channel`, async () => {
      const res = await system.post(
        `/models/${EMBEDDER}`,
        { inputs, parameters: { pooling: 'none' } },
        { 'x-priority': priority },
      );
      assert.equal(res.status, 200, JSON.stringify(res.body).slice(0, 300));
      const answer = res.body as number[][][];
      assert.equal(answer.length, 10);
      assert.deepEqual([answer[0].length, answer[0][0].length], [512, 384]);
      assert.doesNotMatch(system.logs(), /unreadable result message/);
      if (priority === 'batch') await assertNoOutcomeInEventStream(res.headers.get('x-request-id')!);
    });
  }

  it('answers one large input with its output, not a list of one, as JSON', async () => {
    // 512 vectors of 384 numbers, about 3.8 MB: recorded too, and written as the worker serialized it.
    const res = await system.post(`/models/${EMBEDDER}`, { inputs: inputs[0], parameters: { pooling: 'none' } });
    assert.equal(res.status, 200, JSON.stringify(res.body).slice(0, 300));
    assert.equal(res.headers.get('content-type'), 'application/json; charset=utf-8');
    const answer = res.body as number[][];
    assert.deepEqual([answer.length, answer[0].length, typeof answer[511][383]], [512, 384, 'number']);
  });

  /** A job's large outcome stays out of its queue's event stream, which keeps a hundred events whatever their size. */
  async function assertNoOutcomeInEventStream(jobId: string): Promise<void> {
    const redis = new Redis(system.redisUrl);
    try {
      const events = await redis.xrange(`${system.prefix}:${queueNameFor(EMBEDDER)}:events`, '-', '+');
      const completed = events
        .map(([, fields]) => fields)
        .find((fields) => fields[1] === 'completed' && fields[3] === jobId);
      assert.ok(completed, `a completed event for job ${jobId}`);
      assert.ok(Math.max(...completed.map((field) => field.length)) < OUTCOME_MESSAGE_MAX_BYTES);
      assert.match(completed.join(' '), /"recorded"/);
    } finally {
      redis.disconnect();
    }
  }

  /** A client that asks for the large answer and reads none of it: its socket reads what fits its buffer, then stops. */
  async function askAndNeverRead(port: number): Promise<net.Socket> {
    const body = JSON.stringify({ inputs, parameters: { pooling: 'none' } });
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => {});
    await new Promise((connected) => socket.once('connect', connected));
    socket.write(
      `POST /models/${EMBEDDER} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    return socket;
  }

  it('disconnects a client that stops reading its answer for HTTP_SEND_TIMEOUT_MS, and lets go of what it held', async () => {
    const other = new TestSystem(system.prefix);
    const sockets: net.Socket[] = [];
    try {
      await other.startGateway({ HTTP_SEND_TIMEOUT_MS: 1000, RESULT_POLL_MS: 600_000 });
      await other.waitForWorkers(EMBEDDER);
      sockets.push(await askAndNeverRead(other.port));
      await waitFor(
        'the unread answer closed',
        async () => (await other.metric('tserve_unread_answers_closed_total', { reason: 'stalled' })) === 1,
        30_000,
      );
      assert.equal(await other.metric('tserve_unread_answer_bytes_held'), 0);
      assert.match(other.logs(), /closed a connection whose client did not read its answer/);
    } finally {
      sockets.forEach((socket) => socket.destroy());
      await other.gateway?.stop();
    }
  });

  it('holds at most MAX_UNREAD_ANSWERS_BYTES of unread answers, closing those that waited longest, and still answers a client that reads', async () => {
    const other = new TestSystem(system.prefix);
    const sockets: net.Socket[] = [];
    const overBudget = () => other.metric('tserve_unread_answers_closed_total', { reason: 'over budget' });
    try {
      // Each unread answer holds about 38 MB less what the sockets' buffers took: two pass 20 MB.
      await other.startGateway({
        MAX_UNREAD_ANSWERS_BYTES: 20_000_000,
        HTTP_SEND_TIMEOUT_MS: 600_000,
        RESULT_POLL_MS: 600_000,
      });
      await other.waitForWorkers(EMBEDDER);
      sockets.push(await askAndNeverRead(other.port));
      await waitFor(
        'the first answer held',
        async () => (await other.metric('tserve_unread_answer_bytes_held')) > 0,
        30_000,
      );
      assert.equal(await overBudget(), 0, 'a lone answer is held, however large');
      sockets.push(await askAndNeverRead(other.port));
      await waitFor('the older unread answer closed', async () => (await overBudget()) === 1, 30_000);
      const res = await other.post(`/models/${EMBEDDER}`, { inputs, parameters: { pooling: 'none' } });
      assert.equal(res.status, 200, JSON.stringify(res.body).slice(0, 300));
      assert.equal((res.body as number[][][]).flat().length, 10 * 512);
      assert.equal(await overBudget(), 2, 'the second unread answer made way for it');
    } finally {
      sockets.forEach((socket) => socket.destroy());
      await other.gateway?.stop();
    }
  });
});
