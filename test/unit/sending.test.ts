import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Priority, QueuedRequest, WorkNotice } from '@tserve/contract';
import { PROTOCOL, textLength } from '@tserve/contract';
import {
  EnqueueCoalescer,
  JobSender,
  MOST_CHARS_PER_ENQUEUE,
  Withdrawn,
  oneEnqueue,
  splitIntoJobs,
  type CoalescedJob,
} from '../../apps/gateway/src/transport/sending.ts';

type Enqueue = (model: string, priority: Priority, jobs: CoalescedJob[]) => Promise<void>;

const request = (id: string, inputs = 1): QueuedRequest => ({
  id,
  inputs: Array(inputs).fill('x'),
  parameters: {},
  deadline: Date.now() + 10_000,
  enqueuedAt: Date.now(),
});

/** An enqueue that completes only when the test says so, recording what it was given. */
function heldEnqueue() {
  const calls: Array<{ model: string; priority: Priority; jobs: CoalescedJob[]; release: (err?: Error) => void }> = [];
  const enqueue = (model: string, priority: Priority, jobs: CoalescedJob[]) =>
    new Promise<void>((resolve, reject) =>
      calls.push({ model, priority, jobs, release: (err) => (err ? reject(err) : resolve()) }),
    );
  return { calls, enqueue };
}

/**
 * A coalescer over `enqueue`: batches of 32, other requests outstanding at every send (so each job
 * asks for the worker's word that it took it), a long grace.
 */
function coalescerOver(
  enqueue: Enqueue,
  options: {
    maxSequences?: (model: string) => number;
    /** This gateway's requests for the model accepted and not yet answered. */
    depth?: (model: string) => number;
    graceMs?: number;
  } = {},
) {
  const maxSequences = options.maxSequences ?? (() => 32);
  /** Each request submitted with its model's batch size, as the inference service sends it. */
  class Coalescer extends EnqueueCoalescer {
    override submit(model: string, request: QueuedRequest, priority: Priority = 'interactive') {
      return super.submit(model, request, priority, maxSequences(model));
    }
  }
  return new Coalescer({
    sender: { enqueue },
    depth: { own: options.depth ?? (() => Number.POSITIVE_INFINITY) },
    graceMs: options.graceMs ?? 60_000,
  });
}

describe('splitIntoJobs', () => {
  it('keeps order and caps each job by sequences; an oversized request goes alone', () => {
    const entries = [request('a', 2), request('b', 2), request('c', 1), request('d', 5), request('e', 1)].map((r) => ({
      request: r,
    }));
    assert.deepEqual(
      splitIntoJobs(entries, 4).map((job) => job.map((e) => e.request.id)),
      [['a', 'b'], ['c'], ['d'], ['e']],
    );
    assert.deepEqual(splitIntoJobs([], 4), []);
  });
});

describe('oneEnqueue', () => {
  const ofChars = (...lengths: number[]) => lengths.map((n) => ({ request: { inputs: ['x'.repeat(n)] } }));
  it('takes entries in order while their text fits, and always the first', () => {
    assert.equal(oneEnqueue(ofChars(3, 3, 3), 7), 2);
    assert.equal(oneEnqueue(ofChars(3, 3, 3), 9), 3);
    assert.equal(oneEnqueue(ofChars(20, 1), 7), 1, 'a request larger than the bound goes alone');
    assert.equal(oneEnqueue([], 7), 0);
  });
  it('counts every string of pair and question inputs', () => {
    assert.equal(
      textLength({ inputs: [{ text: 'abc', text_pair: 'de' }, { question: 'q', context: 'ctx' }, 'zz'] }),
      11,
    );
  });
});

/** The next turn of the event loop: what a sender schedules for after its current one has run by then. */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A JobSender over fakes: adds that succeed at once unless `held`, notices recorded as published. */
function fakeSender(options: { held?: boolean; refuse?: boolean } = {}) {
  const notices: WorkNotice[] = [];
  const added: string[] = [];
  const replies: Array<() => void> = [];
  const heard: Array<() => void> = [];
  /** Resolves when the next notice is published. */
  const nextNotice = () => new Promise<void>((resolve) => heard.push(resolve));
  const add = (ids: string[]) => {
    added.push(...ids);
    return options.held ? new Promise<void>((resolve) => replies.push(resolve)) : Promise.resolve();
  };
  const sender = new JobSender({
    redis: {
      publish: async (_channel: string, message: string) => {
        notices.push(JSON.parse(message) as WorkNotice);
        heard.shift()?.();
      },
    } as unknown as Redis,
    queues: {
      get: () =>
        ({
          waitUntilReady: async () => {},
          add: (_name: string, _data: unknown, opts: { jobId: string }) => add([opts.jobId]),
          addBulk: (jobs: Array<{ opts: { jobId: string } }>) => add(jobs.map((j) => j.opts.jobId)),
        }) as unknown as Queue,
    },
    prefix: 'p',
    replyTo: 'reply',
    keepMs: 1000,
    breaker: { guard: (call) => (options.refuse ? Promise.reject(new Error('breaker open')) : call()) },
  });
  return { sender, notices, added, replies, nextNotice };
}

const job = (id: string, text = 'x'): CoalescedJob => ({
  id,
  requests: [{ ...request(id), inputs: [text] }],
  tellTaken: true,
});

describe('JobSender', () => {
  it("copies a lone small interactive request's job into its work notice, and no other", async () => {
    const { sender, notices, added } = fakeSender();
    const send = async (priority: Priority, jobs: CoalescedJob[]) => {
      await sender.enqueue('m', priority, jobs);
      await nextTurn();
    };
    const lone = job('lone');
    await send('interactive', [lone]);
    await send('batch', [job('batch')]);
    await send('interactive', [job('a'), job('b')]);
    await send('interactive', [{ id: 'pair', requests: [request('p1'), request('p2')], tellTaken: true }]);
    await send('interactive', [job('long', 'x'.repeat(2049))]);
    assert.deepEqual(added, ['lone', 'batch', 'a', 'b', 'pair', 'long'], 'every job is added to the queue');
    assert.deepEqual(
      notices.map((notice) => notice.job?.id),
      ['lone', undefined, undefined, undefined, undefined],
    );
    assert.deepEqual(notices[0].job?.data, {
      kind: 'job',
      protocol: PROTOCOL,
      requests: lone.requests,
      replyTo: 'reply',
      tellTaken: true,
      keepMs: 1000,
    });
  });

  it('publishes a notice that carries its job once the add has gone out, not once Redis has answered it', async () => {
    const { sender, notices, added, replies, nextNotice } = fakeSender({ held: true });
    const published = nextNotice();
    const sent = sender.enqueue('m', 'interactive', [job('lone')]);
    await published;
    assert.deepEqual(added, ['lone']);
    assert.equal(replies.length, 1, 'the add is still unanswered: the worker starts the copy meanwhile');
    assert.deepEqual(
      notices.map((notice) => notice.job?.id),
      ['lone'],
    );
    replies.shift()!();
    await sent;

    const both = sender.enqueue('m', 'interactive', [job('a'), job('b')]);
    // Turns enough for the add to go out and for a notice scheduled after it to be published.
    for (let turn = 0; turn < 3; turn++) await nextTurn();
    assert.deepEqual(added, ['lone', 'a', 'b']);
    assert.equal(notices.length, 1, 'a notice without a copy waits until Redis holds its jobs');
    replies.shift()!();
    await both;
    assert.equal(notices.length, 2);
  });

  it('publishes no notice for a job the breaker kept out of Redis', async () => {
    const { sender, notices, added } = fakeSender({ refuse: true });
    await assert.rejects(sender.enqueue('m', 'interactive', [job('lone')]), /breaker open/);
    await nextTurn();
    assert.deepEqual(added, []);
    assert.deepEqual(notices, []);
  });
});

describe('EnqueueCoalescer', () => {
  it('splits what waits into enqueues of at most MOST_CHARS_PER_ENQUEUE characters, sent one after another', async () => {
    const { calls, enqueue } = heldEnqueue();
    const coalescer = coalescerOver(enqueue, { depth: () => 0 });
    const big = (id: string): QueuedRequest => ({ ...request(id), inputs: ['x'.repeat(MOST_CHARS_PER_ENQUEUE / 2)] });
    const sent = [
      coalescer.submit('m', request('r0')),
      ...['b1', 'b2', 'b3', 'b4', 'b5'].map((id) => coalescer.submit('m', big(id))),
    ];
    assert.equal(calls.length, 1);
    calls[0].release();
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(
      calls[1].jobs.flatMap((job) => job.requests.map((r) => r.id)),
      ['b1', 'b2'],
      'two halves fill one enqueue',
    );
    calls[1].release();
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(
      calls[2].jobs.flatMap((job) => job.requests.map((r) => r.id)),
      ['b3', 'b4'],
    );
    calls[2].release();
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(
      calls[3].jobs.flatMap((job) => job.requests.map((r) => r.id)),
      ['b5'],
    );
    calls[3].release();
    assert.deepEqual(await Promise.all(sent), ['r0', 'b1', 'b1', 'b3', 'b3', 'b5']);
  });

  it('sends a lone request at once, and those arriving before a worker takes its job together after it', async () => {
    const { calls, enqueue } = heldEnqueue();
    const coalescer = coalescerOver(enqueue);
    const first = coalescer.submit('m', request('r1'));
    assert.equal(calls.length, 1, 'no timer: the first request went out at once');
    const rest = ['r2', 'r3'].map((id) => coalescer.submit('m', request(id)));
    assert.equal(calls.length, 1, 'the others wait for the enqueue in flight');
    calls[0].release();
    assert.equal(await first, 'r1');
    rest.push(coalescer.submit('m', request('r4')));
    await new Promise((r) => setImmediate(r));
    assert.equal(calls.length, 1, 'and, once it is in Redis, for a worker to take it');
    assert.deepEqual(coalescer.held(), new Map([['m', 3]]));
    coalescer.taken(['someone-elses-job']);
    assert.equal(calls.length, 1);
    coalescer.taken(['r1']);
    assert.equal(calls.length, 2);
    assert.deepEqual(
      calls[1].jobs.map((j) => [j.id, j.requests.map((r) => r.id)]),
      [['r2', ['r2', 'r3', 'r4']]],
    );
    calls[1].release();
    assert.deepEqual(await Promise.all(rest), ['r2', 'r2', 'r2'], 'each learns the id of the job that carries it');
  });

  it("keeps models apart, splits a flush by the model's batch size, and fails a flush as a whole", async () => {
    const { calls, enqueue } = heldEnqueue();
    const coalescer = coalescerOver(enqueue, { maxSequences: (model) => (model === 'small' ? 2 : 32) });
    void coalescer.submit('small', request('s0'));
    void coalescer.submit('other', request('o0'));
    assert.equal(calls.length, 2, "another model's enqueue does not wait");
    const waiting = ['s1', 's2', 's3'].map((id) => coalescer.submit('small', request(id)));
    calls[0].release();
    coalescer.taken(['s0']);
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(
      calls[2].jobs.map((j) => j.requests.map((r) => r.id)),
      [['s1', 's2'], ['s3']],
    );
    calls[2].release(new Error('redis down'));
    for (const w of waiting) await assert.rejects(w, /redis down/);
  });

  it('keeps the classes apart: a batch request does not ride in an interactive job', async () => {
    const { calls, enqueue } = heldEnqueue();
    const coalescer = coalescerOver(enqueue);
    void coalescer.submit('m', request('i1'));
    void coalescer.submit('m', request('b1'), 'batch');
    assert.deepEqual(
      calls.map((c) => [c.priority, c.jobs[0].id]),
      [
        ['interactive', 'i1'],
        ['batch', 'b1'],
      ],
    );
    assert.equal(coalescer.withdraw('m', 'b1'), false, 'withdrawn from its own class only');
  });

  it('withdraws a request not yet sent, and only such a one', async () => {
    const { calls, enqueue } = heldEnqueue();
    const coalescer = coalescerOver(enqueue);
    const sent = coalescer.submit('m', request('r1'));
    const held = coalescer.submit('m', request('r2'));
    assert.equal(coalescer.withdraw('m', 'r1'), false, 'already in flight');
    assert.equal(coalescer.withdraw('m', 'r2'), true);
    await assert.rejects(held, Withdrawn);
    calls[0].release();
    await sent;
    await new Promise((r) => setImmediate(r));
    assert.equal(calls.length, 1, 'nothing left to send');
  });

  it('counts a job taken before its enqueue answered, and sends what waits after the grace when no word comes', async (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] });
    const { calls, enqueue } = heldEnqueue();
    const coalescer = coalescerOver(enqueue, { graceMs: 1000 });
    void coalescer.submit('m', request('r1'));
    coalescer.taken(['r1']);
    calls[0].release();
    await new Promise((r) => setImmediate(r));
    void coalescer.submit('m', request('r2'));
    assert.equal(calls.length, 2, "the worker's word overtook the enqueue's reply: r1's lane is free");
    calls[1].release();
    await new Promise((r) => setImmediate(r));
    const late = coalescer.submit('m', request('r3'));
    t.mock.timers.tick(999);
    assert.equal(calls.length, 2, 'r2 was not taken yet: r3 waits');
    t.mock.timers.tick(1);
    assert.equal(calls.length, 3, 'no word of r2 within the grace: r3 goes anyway');
    calls[2].release();
    assert.equal(await late, 'r3');
  });

  it("asks for the worker's word only with other requests outstanding; what arrives behind a job sent without it goes at once", async () => {
    const { calls, enqueue } = heldEnqueue();
    // As the gateway counts: each submitted request is outstanding until answered (none is here).
    let outstanding = 0;
    const coalescer = coalescerOver(enqueue, { depth: () => outstanding });
    const submit = (id: string) => {
      outstanding++;
      return coalescer.submit('m', request(id));
    };
    void submit('r1');
    calls[0].release();
    await new Promise((r) => setImmediate(r));
    void submit('r2');
    assert.equal(calls.length, 2, 'r1 asked for no word, so nothing is held behind it');
    assert.deepEqual(
      calls.map((c) => c.jobs.map((j) => [j.id, j.tellTaken])),
      [[['r1', false]], [['r2', true]]],
      'r1 went out alone; r2 found r1 outstanding',
    );
    calls[1].release();
    await new Promise((r) => setImmediate(r));
    void submit('r3');
    assert.equal(calls.length, 2, 'r3 waits for the word that r2 was taken');
    coalescer.taken(['r1']);
    assert.equal(calls.length, 2, "a word for a job that asked for none (an older worker's) frees nothing");
    coalescer.taken(['r2']);
    assert.equal(calls.length, 3);
  });
});
