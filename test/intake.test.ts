/**
 * A worker alone on its model starts a lone job from the copy its work notice carries, while it
 * fetches the job: the work is answered only if the fetch brings that job, and no job is lost or
 * left behind when the fetch brings another, on a real Redis through BullMQ.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import pino from 'pino';
import { PROTOCOL, type JobData, type WorkNotice } from '@tserve/contract';
import { queueNameFor } from '@tserve/queue';
import { Intake } from '../apps/worker/src/transport/intake.ts';
import { PrivateRedis, freePort, uniquePrefix } from './helpers/system.ts';

const MODEL = 'test/model';

/** 'pending' unless the promise has settled already: a few microtasks pass, and no I/O. */
const state = (promise: Promise<unknown> | undefined) =>
  Promise.race([
    promise?.then(() => 'settled'),
    Promise.resolve()
      .then(() => undefined)
      .then(() => 'pending'),
  ]);

const NOW = Date.now();

const data = (id: string): JobData => ({
  kind: 'job',
  protocol: PROTOCOL,
  requests: [{ id, inputs: [`text of ${id}`], parameters: {}, deadline: NOW + 60_000, enqueuedAt: NOW }],
  replyTo: 'gateway',
  tellTaken: false,
  keepMs: 10_000,
});

describe('intake', () => {
  let redis: PrivateRedis;
  let connection: Redis;
  let queue: Queue<JobData>;
  let intake: Intake;
  const peers = { peers: 0 };
  /** The jobs the worker holds, as its settling names them. */
  let held: string[] = [];

  before(async () => {
    redis = new PrivateRedis(await freePort());
    await redis.start();
    connection = new Redis(redis.url, { maxRetriesPerRequest: null });
    const prefix = uniquePrefix('intake');
    queue = new Queue<JobData>(queueNameFor(MODEL), { connection, prefix });
    intake = new Intake(
      connection,
      { prefix, model: MODEL, workerId: 'worker-1', lockMs: 30_000, stalledIntervalMs: 30_000, peers },
      pino({ level: 'silent' }),
    );
    intake.start(() => held);
    // A new intake looks in the queue first; finding it empty, it waits for notices.
    assert.equal(await intake.next(), undefined);
  });
  after(async () => {
    await intake.close();
    await queue.close();
    connection.disconnect();
    await redis.stop();
  });

  /** Adds a job, as a gateway does, and returns its notice, carrying its copy. */
  async function add(id: string): Promise<string> {
    await queue.add('request', data(id), { jobId: id });
    return JSON.stringify({
      kind: 'work',
      jobs: 1,
      priority: 'interactive',
      job: { id, data: data(id) },
    } satisfies WorkNotice);
  }

  it('starts a lone job from its notice, and holds it once the fetch brings it', async () => {
    const notice = await add('lone');
    const next = intake.next();
    intake.noticed(notice);
    const work = await next;
    assert.equal(work?.id, 'lone');
    assert.deepEqual(work?.requests, data('lone').requests);
    assert.equal(await state(work?.job), 'pending', 'handed out before its fetch is answered');
    const job = await work?.job;
    assert.equal(job?.id, 'lone', 'fetched by this worker');
    assert.equal(await job?.getState(), 'active');
    await job?.moveToCompleted({ done: true }, 'worker-1', false);
  });

  it('drops the copy where the fetch brings an older job, and then runs both jobs', async () => {
    await queue.add('request', data('unannounced'), { jobId: 'unannounced' });
    const notice = await add('announced');
    const next = intake.next();
    intake.noticed(notice);
    const started = await next;
    assert.equal(started?.id, 'announced');
    assert.equal(await started?.job, undefined, 'the fetch brought the older job: the copy is not answered');
    const older = await intake.next();
    assert.equal(older?.id, 'unannounced', 'the job fetched instead is handed out next');
    const again = await intake.next();
    assert.equal(again?.id, 'announced', 'the job started ahead is fetched and run as any other');
    for (const work of [older, again]) {
      const job = await work?.job;
      assert.equal(await job?.getState(), 'active');
      await job?.moveToCompleted({ done: true }, 'worker-1', false);
    }
  });

  it('drops the copy where its notice overtook the add, and runs the job once it is added', async () => {
    // A gateway publishes a notice that carries its job without waiting for the add's reply.
    const notice = JSON.stringify({
      kind: 'work',
      jobs: 1,
      priority: 'interactive',
      job: { id: 'early', data: data('early') },
    } satisfies WorkNotice);
    const next = intake.next();
    intake.noticed(notice);
    const started = await next;
    assert.equal(started?.id, 'early');
    assert.equal(await started?.job, undefined, 'the fetch found no job: the copy is not answered');
    assert.equal(await intake.waiting(), 1, 'the job is still expected: fetched again, not at the next poll');
    await queue.add('request', data('early'), { jobId: 'early' });
    const again = await intake.next();
    assert.equal(again?.id, 'early', 'the job, once added, is fetched and run as any other');
    const job = await again?.job;
    assert.equal(await job?.getState(), 'active');
    await job?.moveToCompleted({ done: true }, 'worker-1', false);
  });

  it('fetches a job whose notice comes while the worker holds jobs, and starts no copy of it', async () => {
    // As a worker whose model runs a batch, which fetched this job on a poll before its notice came.
    held = ['running'];
    try {
      const notice = await add('busy');
      const next = intake.next();
      intake.noticed(notice);
      const work = await next;
      assert.equal(work?.id, 'busy');
      assert.equal(await state(work?.job), 'settled', 'handed out once fetched, not from the copy');
      const job = await work?.job;
      assert.equal(await job?.getState(), 'active');
      await job?.moveToCompleted({ done: true }, 'worker-1', false);
    } finally {
      held = [];
    }
  });

  it('fetches as before where other workers serve the model', async () => {
    peers.peers = 1;
    try {
      const notice = await add('shared');
      const next = intake.next();
      intake.noticed(notice);
      const work = await next;
      assert.equal(work?.id, 'shared');
      assert.equal(await state(work?.job), 'settled', 'handed out once fetched');
      const job = await work?.job;
      assert.equal(await job?.getState(), 'active', 'held before it is handed out');
      await job?.moveToCompleted({ done: true }, 'worker-1', false);
    } finally {
      peers.peers = 0;
    }
  });
});
