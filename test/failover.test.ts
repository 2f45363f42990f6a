/**
 * Issue 87: Redis as production runs it, a primary that fails over. A primary, a replica and three
 * sentinels on private ports; the gateway and a worker find the primary through the sentinels
 * (REDIS_SENTINELS; REDIS_URL's host is a name that resolves nowhere). The primary is killed with
 * SIGKILL under load: 64 clients, a Batch API batch running, the worker mid-batch. Every request
 * gets its answer or a 503 that names the cause, none is left to its deadline, none is answered
 * twice; the batch completes with every line exactly once; /ready and /backlog recover. The gap is
 * measured and reported (t.diagnostic); bench/HISTORY.md keeps the figures.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { createRedis, queueNameFor } from '@tserve/queue';
import { loadGatewayConfig } from '@tserve/config';
import { sleep, TestSystem, uniquePrefix, waitFor } from './helpers/system.ts';
import { SentinelGroup } from './helpers/sentinel.ts';
import { startNode } from './helpers/processes.ts';
import { CLASSIFIER as MODEL } from './helpers/replicas.ts';

/** Sentinel's down-after-milliseconds: how long the primary is silent before the sentinels call it down. */
const DOWN_AFTER_MS = 1000;
const CLIENTS = 64;
const LINES = 3000;

interface Sent {
  start: number;
  end: number;
  status: number;
  error?: string;
  id: string | null;
}

describe('Redis failover through Sentinel', () => {
  it('a primary killed under load: every request answered or refused with a 503 naming the cause, the batch exactly once', async (t) => {
    const group = await SentinelGroup.start({ downAfterMs: DOWN_AFTER_MS });
    // Production's liveness periods (HEARTBEAT_MS 1000 and what follows it), not the tests' short ones.
    const live = { HEARTBEAT_MS: 1000, WORKER_TTL_MS: 5000 };
    const system = new TestSystem(uniquePrefix('failover'), group.env.REDIS_URL, { ...group.env, ...live });
    t.after(async () => {
      await system.stop();
      await group.stop();
    });
    // A deadline far past any failover: a request left to it would show as a 504.
    const gateway = await system.startGateway({ LOG_LEVEL: 'info', REQUEST_TIMEOUT_MS: 120_000 });
    system.startWorker({ model: MODEL, env: { JOB_LOCK_MS: 5000, STALLED_INTERVAL_MS: 5000 } });
    await system.waitForWorkers(MODEL);
    assert.equal((await system.infer(MODEL, 'warm')).status, 200);

    const client = new OpenAI({ baseURL: `${system.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const lines = Array.from({ length: LINES }, (_, i) =>
      JSON.stringify({
        custom_id: `line-${i}`,
        method: 'POST',
        url: `/models/${MODEL}`,
        body: { inputs: `line ${i}: the soup was cold but the waiter was friendly` },
      }),
    );
    const file = await client.files.create({
      file: await toFile(Buffer.from(`${lines.join('\n')}\n`), 'input.jsonl'),
      purpose: 'batch',
    });
    const batch = await client.batches.create({
      input_file_id: file.id,
      endpoint: `/models/${MODEL}` as '/v1/embeddings',
      completion_window: '24h',
    });

    // 64 clients, each sending its next request as the last is answered, until told to stop.
    const sent: Sent[] = [];
    let stopping = false;
    const clients = Array.from({ length: CLIENTS }, async (_, c) => {
      for (let i = 0; !stopping; i++) {
        const start = Date.now();
        const r = await system.infer(MODEL, `client ${c} request ${i}`).catch((err: Error) => ({
          status: 0,
          body: { error: `no answer: ${err.message}` },
          headers: new Headers(),
        }));
        sent.push({
          start,
          end: Date.now(),
          status: r.status,
          error: r.status === 200 ? undefined : String(r.body?.error),
          id: r.headers.get('x-request-id'),
        });
      }
    });

    // The worker holds jobs, and the batch has begun and is not done, when the primary dies.
    // Through the sentinels too: the programs' own settings, read by their own loader.
    const watcher = createRedis(loadGatewayConfig(group.env), 'worker');
    const queue = new Queue(queueNameFor(MODEL), { connection: watcher, prefix: system.prefix });
    await waitFor('the batch under way and the worker mid-batch', async () => {
      const now = await client.batches.retrieve(batch.id);
      const done = now.request_counts?.completed ?? 0;
      return done > 0 && done < LINES && (await queue.getActive()).length > 0 && sent.length > 200;
    });
    await queue.close();
    watcher.disconnect();
    const { switched, close } = await group.watchSwitch();
    const primary = await group.primaryPort();
    const killedAt = Date.now();
    await group.servers.get(primary)!.stop('SIGKILL');

    // Load goes on until requests sent after the kill are answered again, and a while after.
    const back = await waitFor(
      'a request sent after the kill answered 200',
      async () => sent.find((s) => s.start > killedAt && s.status === 200),
      60_000,
      20,
    );
    const switchedAt = await switched;
    close();
    await waitFor(
      'a thousand answers since',
      async () => sent.filter((s) => s.start > back.end).length >= 1000,
      60_000,
    );
    stopping = true;
    await Promise.all(clients);

    // Every request answered: 200, or a 503 that names the cause: Redis lost or failing over, a job
    // lost with it, or the worker whose heartbeat it lost.
    const statuses = new Map<number, number>();
    for (const s of sent) statuses.set(s.status, (statuses.get(s.status) ?? 0) + 1);
    const others = sent.filter((s) => s.status !== 200 && s.status !== 503);
    assert.deepEqual(others, [], 'only 200 and 503: no 504 (left to the deadline), no 500, no socket error');
    const refused = sent.filter((s) => s.status === 503);
    for (const r of refused)
      assert.match(r.error!, /Redis is unreachable|Redis was lost|lost with its job|no live worker/, JSON.stringify(r));
    assert.ok(
      refused.every((r) => r.end >= killedAt),
      'nothing refused before the kill',
    );
    // Answered once: the gateway's request log (a line as each answer closes) names each request id once.
    const logged = new Map<string, number>();
    await waitFor('every request in the request log', async () => {
      logged.clear();
      for (const line of gateway.output.split('\n')) {
        const id = /"reqId":"([^"]+)"/.exec(line)?.[1];
        if (id && /"status":\d+/.test(line)) logged.set(id, (logged.get(id) ?? 0) + 1);
      }
      return sent.every((s) => logged.has(s.id!));
    });
    assert.deepEqual(
      [...logged].filter(([, n]) => n > 1),
      [],
      'no request answered twice',
    );
    assert.doesNotMatch(gateway.output, /ERR_HTTP_HEADERS_SENT|Cannot set headers/);

    // The batch completes, every line in the output file exactly once, none in the error file.
    const done = await waitFor(
      'the batch completed',
      async () => {
        const now = await client.batches.retrieve(batch.id);
        return ['completed', 'failed', 'expired', 'cancelled'].includes(now.status) && now;
      },
      120_000,
      250,
    );
    assert.equal(done.status, 'completed', JSON.stringify(done));
    const output = (await (await client.files.content(done.output_file_id!)).text()).split('\n').filter(Boolean);
    const ids = output.map((line) => (JSON.parse(line) as { custom_id: string }).custom_id);
    assert.equal(new Set(ids).size, ids.length, 'no line twice');
    assert.deepEqual([...ids].sort(), lines.map((_, i) => `line-${i}`).sort(), 'every line once');
    for (const line of output)
      assert.equal((JSON.parse(line) as { response: { status_code: number } }).response.status_code, 200);
    assert.equal(done.error_file_id ?? null, null, 'no line in an error file');

    // /ready and /backlog recover.
    await waitFor('/ready 200 again', async () => (await fetch(`${system.url}/ready`)).status === 200);
    await waitFor('/backlog 0 again', async () => {
      const res = await fetch(`${system.url}/backlog?model=${MODEL}`);
      return res.status === 200 && ((await res.json()) as { backlog: number }).backlog === 0;
    });
    assert.notEqual(await group.primaryPort(), primary, 'the sentinels promoted the replica');

    // The figures (bench/HISTORY.md): the gap, and what the requests in flight got.
    const inFlight = sent.filter((s) => s.start < killedAt && s.end > killedAt);
    const beforeBack = sent.filter((s) => s.start < back.start);
    const latest = Math.max(...beforeBack.map((s) => s.end)) - killedAt;
    const after = sent.filter((s) => s.start >= killedAt);
    t.diagnostic(
      `down-after ${DOWN_AFTER_MS} ms; +switch-master ${switchedAt - killedAt} ms after the kill; ` +
        `first 200 for a request sent after the kill: sent ${back.start - killedAt} ms, answered ${back.end - killedAt} ms after; ` +
        `the last request sent before then answered ${latest} ms after the kill`,
    );
    t.diagnostic(
      `requests: ${sent.length} (${JSON.stringify(Object.fromEntries(statuses))}); in flight at the kill ${inFlight.length}: ` +
        `${inFlight.filter((s) => s.status === 200).length} answered 200, ${inFlight.filter((s) => s.status === 503).length} refused 503, ` +
        `last at ${Math.max(...inFlight.map((s) => s.end)) - killedAt} ms; sent after the kill until service was back: ` +
        `${after.filter((s) => s.start < back.start).length}, refused ${after.filter((s) => s.start < back.start && s.status === 503).length}`,
    );
    const causes = new Map<string, number>();
    for (const r of refused) {
      const cause = r.error!.replace(/\d+(\.\d+)? s ago/, 'N s ago');
      causes.set(cause, (causes.get(cause) ?? 0) + 1);
    }
    t.diagnostic(`503s by cause: ${JSON.stringify(Object.fromEntries(causes))}`);
  });

  it('fails at once the requests whose jobs the new primary never saw, and within REDIS_FAILOVER_WAIT_MS those of a primary that does not come back', async (t) => {
    // Passwords on the servers (REDIS_URL's, its host ignored) and on the sentinels (REDIS_SENTINEL_PASSWORD).
    const group = await SentinelGroup.start({
      downAfterMs: DOWN_AFTER_MS,
      password: 'primary:secret',
      sentinelPassword: 'sentinel-secret',
    });
    // A frozen worker stays live to the gateway meanwhile, so that its model stays served.
    const live = { WORKER_TTL_MS: 60_000 };
    const system = new TestSystem(uniquePrefix('lost-writes'), group.env.REDIS_URL, { ...group.env, ...live });
    t.after(async () => {
      await system.stop();
      await group.stop();
    });
    // A primary the sentinels do not know, or a sentinel password they refuse, stops the gateway at
    // start, naming the setting.
    const refusedAtStart = async (env: Record<string, string>) => {
      const gateway = startNode({
        name: 'gateway',
        script: 'apps/gateway/dist/main.js',
        env: { ...group.env, ...env, PORT: 0, GRPC_PORT: 0 },
      });
      const exited = await Promise.race([gateway.exited, sleep(30_000).then(() => 'still running')]);
      gateway.kill('SIGKILL');
      assert.equal(exited, 1, gateway.output);
      return gateway.output;
    };
    assert.match(
      await refusedAtStart({ REDIS_SENTINEL_MASTER: 'no-such-primary' }),
      /sentinels of primary "no-such-primary" .* know no primary of that name: set REDIS_SENTINEL_MASTER/,
    );
    assert.match(
      await refusedAtStart({ REDIS_SENTINEL_PASSWORD: 'wrong' }),
      /Redis refuses the user or password \(a sentinel: REDIS_SENTINEL_PASSWORD\) at primary "tserve" .*: WRONGPASS .* Check REDIS_SENTINEL_PASSWORD\./,
    );

    // Long enough for any failover here: what these requests get is the new primary's word alone.
    await system.startGateway({ REQUEST_TIMEOUT_MS: 120_000, REDIS_FAILOVER_WAIT_MS: 60_000 });
    const worker = system.startWorker({ model: MODEL });
    await system.waitForWorkers(MODEL);
    assert.equal((await system.infer(MODEL, 'warm')).status, 200);
    /** `n` requests, all in jobs in Redis (none held in the gateway) when this resolves; the worker runs none. */
    const queued = async (n: number, what: string) => {
      const answers = Array.from({ length: n }, (_, i) => system.infer(MODEL, `${what} ${i}`));
      await waitFor(
        `the ${n} requests sent to Redis`,
        async () =>
          (await system.metric('tserve_queue_depth', { model: MODEL })) >= n &&
          (await system.metric('tserve_requests_held', { model: MODEL })) === 0,
      );
      return answers;
    };
    worker.kill('SIGSTOP');
    t.after(() => worker.kill('SIGKILL'));

    // The replica frozen and cut off (a frozen process's kernel would still take in the stream),
    // the primary takes jobs it never passes on; then it dies, and the replica, thawed, is
    // promoted without them.
    const first = await group.primaryPort();
    const replica = [...group.servers.values()].find((s) => s.port !== first)!;
    replica.proc!.kill('SIGSTOP');
    const primary = new Redis(group.urlOf(first));
    await primary.client('KILL', 'TYPE', 'replica');
    primary.disconnect();
    const unseen = await queued(5, 'taken by the old primary alone');
    const { switched, close } = await group.watchSwitch();
    await group.servers.get(first)!.stop('SIGKILL');
    replica.proc!.kill('SIGCONT');
    await switched;
    close();
    for (const answer of await Promise.all(unseen)) {
      assert.equal(answer.status, 503, `lost, not left to the 120 s deadline: ${JSON.stringify(answer.body)}`);
      assert.match(answer.body.error, /lost with its job.*failed over to a replica that never had it/);
    }

    // The new primary dies too, and no replica is left to promote: requests in its jobs get 503
    // once REDIS_FAILOVER_WAIT_MS has passed, naming the cause, rather than their deadlines' 504.
    // A gateway of a short wait takes over (the frozen worker still counts as live).
    await system.gateway!.stop();
    await system.startGateway({ REQUEST_TIMEOUT_MS: 120_000, REDIS_FAILOVER_WAIT_MS: 2000 });
    await system.waitForWorkers(MODEL);
    const stranded = await queued(5, 'on a primary that does not come back');
    await replica.stop('SIGKILL');
    for (const answer of await Promise.all(stranded)) {
      assert.equal(answer.status, 503, JSON.stringify(answer.body));
      assert.match(answer.body.error, /Redis was lost [\d.]+ s ago .* has not come back .*failing over/);
    }
  });
});
