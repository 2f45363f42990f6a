/**
 * docs/architecture.md's "One request's trip" names every source file one `POST /models/<id>`
 * runs, and this test holds it to that: it sends one request to a gateway and a worker started with
 * V8's coverage (NODE_V8_COVERAGE), takes a snapshot of each process's coverage before the request
 * and one after it is settled (test/helpers/coverage-snapshots.mjs), and compares the files whose
 * code ran in between with those the section names. A step added to the path without its file named
 * there fails it, as does a file named that no longer runs. It also counts the questions the
 * request asks: the model registry's once, the overload limits' once per admission's look.
 *
 * Nothing runs on a timer meanwhile: the heartbeat, the registry's refresh, the depth exchange, the
 * fallback read and the lock renewal are all set an hour apart, so the worker is ready before the
 * gateway starts, and the gateway's one refresh at its start finds it.
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { queueNameFor } from '@tserve/queue';
import { cleanPrefix, freePort, MODEL_DIR, REDIS_URL, ROOT, uniquePrefix, waitFor } from './helpers/system.ts';
import { startNode, type Proc } from './helpers/processes.ts';
import { callsOf, CoverageSnapshots, snapshotPreload, type Runs } from './helpers/trip-coverage.ts';
import { CLASSIFIER } from './helpers/replicas.ts';

/** No timer fires within a test's run: every period is an hour (setInterval takes at most 2^31 - 1 ms). */
const HOUR_MS = 3_600_000;

/** The section's numbered steps, and the files they name: `room/file.ts` of the step's app, `packages/...` as it is. */
function documentedTrip(): string[] {
  const text = fs.readFileSync(path.join(ROOT, 'docs/architecture.md'), 'utf8');
  const start = text.indexOf("\n## One request's trip\n");
  assert.ok(start >= 0, 'docs/architecture.md has a section "One request\'s trip"');
  const end = text.indexOf('\n## ', start + 1);
  const named = new Set<string>();
  let app = 'gateway';
  let inStep = false;
  for (const line of text.slice(start, end < 0 ? undefined : end).split('\n')) {
    // A numbered step and the indented lines that continue it; "Gateway:" or "Worker:" says whose.
    inStep = /^\d+\. /.test(line) || (inStep && line.startsWith('   '));
    if (!inStep) continue;
    const whose = /^\d+\. (Gateway|Worker):/.exec(line);
    if (whose) app = whose[1].toLowerCase();
    for (const [, file] of line.matchAll(/`([a-z0-9./-]+\.ts)`/g))
      named.add(file.startsWith('packages/') ? file : `apps/${app}/src/${file}`);
  }
  return [...named].sort();
}

/** POSTs `body` to `pathname` on one kept-alive connection: the request runs on a connection already open. */
function post(agent: http.Agent, port: number, pathname: string, body: unknown) {
  return new Promise<{ status: number; id: string; body: string }>((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path: pathname,
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json' },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, id: String(res.headers['x-request-id']), body: text }),
        );
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

describe("one request's trip", () => {
  const prefix = uniquePrefix('trip');
  const coverage = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-trip-coverage-'));
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const procs: Proc[] = [];
  let port = 0;
  let redis: Redis;
  let queue: Queue;
  /** What the request ran in each process. */
  const ran: { gateway?: Runs; worker?: Runs } = {};

  const common = { REDIS_URL, QUEUE_PREFIX: prefix, MODEL_DIR, HEARTBEAT_MS: HOUR_MS, NODE_V8_COVERAGE: coverage };
  const send = () => post(agent, port, `/models/${CLASSIFIER}`, { inputs: 'a fine day for a walk' });
  /** Sends the request, and waits until its job is settled: every step of its trip has run. */
  const trip = async () => {
    const answer = await send();
    assert.equal(answer.status, 200, answer.body);
    // A request sent alone is its job, named after it.
    await waitFor(
      `job ${answer.id} completed`,
      async () => (await queue.getJobState(answer.id)) === 'completed',
      10_000,
      5,
    );
  };

  before(async () => {
    redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
    queue = new Queue(queueNameFor(CLASSIFIER), { connection: redis, prefix });
    const worker = startNode({
      name: 'worker',
      script: 'apps/worker/dist/main.js',
      nodeArgs: snapshotPreload(ROOT),
      env: { ...common, MODEL: CLASSIFIER, JOB_LOCK_MS: HOUR_MS, STALLED_INTERVAL_MS: HOUR_MS },
    });
    procs.push(worker);
    await waitFor(
      'the worker ready',
      async () =>
        worker.output.includes('worker ready') || (!worker.running && Promise.reject(new Error(worker.output))),
      120_000,
    );
    port = await freePort();
    const gateway = startNode({
      name: 'gateway',
      script: 'apps/gateway/dist/main.js',
      nodeArgs: snapshotPreload(ROOT),
      env: {
        ...common,
        PORT: port,
        HOST: '127.0.0.1',
        GRPC_PORT: 0,
        REGISTRY_REFRESH_MS: HOUR_MS,
        RESULT_POLL_MS: HOUR_MS,
      },
    });
    procs.push(gateway);
    await waitFor('the gateway /ready', async () => (await fetch(`http://127.0.0.1:${port}/ready`)).ok, 30_000);
    // Warmed up, so that what is measured is the path every request takes, not a first one's.
    for (let i = 0; i < 3; i++) await trip();
    const snapshots = {
      gateway: new CoverageSnapshots(gateway, coverage, ROOT),
      worker: new CoverageSnapshots(worker, coverage, ROOT),
    };
    await snapshots.gateway.take();
    await snapshots.worker.take();
    await trip();
    ran.gateway = await snapshots.gateway.take();
    ran.worker = await snapshots.worker.take();
  });
  after(async () => {
    agent.destroy();
    await Promise.all(procs.map((p) => p.stop('SIGKILL')));
    await queue?.close();
    redis?.disconnect();
    await cleanPrefix(REDIS_URL, prefix);
    fs.rmSync(coverage, { recursive: true, force: true });
  });

  it("runs the files docs/architecture.md's trip names, and no others", () => {
    const measured = [...new Set([...ran.gateway!.keys(), ...ran.worker!.keys()])].sort();
    const documented = documentedTrip();
    assert.ok(measured.length > 20, `the request ran ${measured.length} files`);
    assert.deepEqual(
      {
        'ran, and the trip does not name': measured.filter((f) => !documented.includes(f)),
        'named, and did not run': documented.filter((f) => !measured.includes(f)),
      },
      { 'ran, and the trip does not name': [], 'named, and did not run': [] },
      'update docs/architecture.md\'s "One request\'s trip" to the files the request runs',
    );
  });

  it('asks the model registry one question, and the overload limits one at each look of admission', () => {
    const registry = ran.gateway!.get('apps/gateway/src/serving/model-registry.ts') ?? [];
    assert.deepEqual(
      registry.map((f) => [f.name, f.count]),
      [['status', 1]],
    );
    const overload = 'apps/gateway/src/admission/overload.ts';
    assert.equal(callsOf(ran.gateway!, overload, ['beforeBody']), 1, 'before the body');
    assert.equal(callsOf(ran.gateway!, overload, ['afterBody']), 1, 'after it');
  });
});
