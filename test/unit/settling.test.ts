import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import {
  readResultMessage,
  type CancelNotice,
  OUTCOME_MESSAGE_MAX_BYTES,
  type JobData,
  type JobOutcome,
  type JobRecorded,
  type JobsTaken,
  type QueuedRequest,
  type ReadResultMessage,
  type RequestOutcome,
} from '@tserve/contract';
import { TakenJobs } from '../../apps/worker/src/transport/taken-jobs.ts';
import type { Intake } from '../../apps/worker/src/transport/intake.ts';
import { Settling } from '../../apps/worker/src/transport/settling.ts';
import type { Work } from '../../apps/worker/src/transport/work.ts';
import { Cancellations } from '../../apps/worker/src/transport/cancellations.ts';

const notice = (ids: string[], deadline: number) =>
  JSON.stringify({ kind: 'cancel', ids, deadline } satisfies CancelNotice);
const request = (id: string): QueuedRequest => ({ id, inputs: ['x'], parameters: {}, deadline: 0, enqueuedAt: 0 });
const answer = (id: string): RequestOutcome => ({
  id,
  ok: true,
  outputs: [id],
  warnings: [],
  timing: { queue_ms: 0, inference_ms: 0, batch_size: 1 },
});

/** A message as its gateway reads it, its outputs parsed and their JSON left out: what was published. */
function plain(message: ReadResultMessage | undefined): JobOutcome | JobsTaken | JobRecorded {
  assert.ok(message, 'a readable result message');
  if (message.kind !== 'outcome') return message;
  return { ...message, outcomes: message.outcomes.map(({ outputsJson: _json, ...rest }) => ({ ...rest })) };
}

/** Taken jobs, settled over a publisher, that record what they are asked to do. */
function harness() {
  const published: Array<{ channel: string; outcome: JobOutcome }> = [];
  const taken: Array<{ channel: string; message: JobsTaken }> = [];
  const completed: Array<{ job: string; token: string }> = [];
  const stored: Array<{ key: string; outcome: JobOutcome; px: string; ms: number }> = [];
  /** Every write, in the order made: a gateway told to read must find what it reads. */
  const steps: string[] = [];
  const publisher = {
    set: async (key: string, value: string | Buffer, px: string, ms: number) => {
      steps.push(`set ${key}`);
      stored.push({ key, outcome: plain(readResultMessage(Buffer.from(value))) as JobOutcome, px, ms });
    },
    publish: async (channel: string, message: Buffer) => {
      const parsed = plain(readResultMessage(message));
      steps.push(`publish ${parsed.kind} to ${channel}`);
      if (parsed.kind === 'taken') taken.push({ channel, message: parsed });
      else if (parsed.kind === 'outcome') published.push({ channel, outcome: parsed });
      return 1;
    },
  };
  const job = (id: string, requests: string[]): Work => ({
    id,
    requests: requests.map(request),
    // j3 comes from j1's gateway; j4's gateway had nothing else outstanding, and did not ask to be told.
    replyTo: id === 'j3' ? 'reply:j1' : `reply:${id}`,
    tellTaken: id !== 'j4',
    bulk: false,
    keepMs: 15_000,
    job: Promise.resolve({
      moveToCompleted: async (result: JobOutcome | JobRecorded, token: string) => {
        steps.push(`complete ${id} ${result.kind === 'recorded' ? 'as recorded' : 'with the outcome'}`);
        completed.push({ job: id, token });
      },
    } as unknown as Job<JobData>),
  });
  const silent = { debug() {}, warn() {} } as unknown as Logger;
  const cancellations = new Cancellations();
  const settling = new Settling(publisher as unknown as Redis, { prefix: 'p', model: 'm', token: 'worker-1' }, silent);
  const sink = new TakenJobs({
    intake: {} as Intake,
    settling,
    publisher: publisher as unknown as Redis,
    cancellations,
    logger: silent,
  });
  return { sink, job, published, completed, stored, taken, cancellations, steps };
}

describe('Settling', () => {
  it("settles a job once, with its last outcome, the outcomes in the job's order", async () => {
    const { sink, job, published, completed } = harness();
    sink.track([job('j1', ['a', 'b']), job('j2', ['c'])]);
    assert.deepEqual(sink.jobIds(), ['j1', 'j2']);
    sink.accept(request('b'), answer('b'));
    assert.equal(published.length, 0, 'j1 still waits for a');
    sink.accept(request('a'), answer('a'));
    sink.accept(request('a'), answer('a'));
    sink.accept(request('unknown'), answer('unknown'));
    await sink.drain();
    assert.deepEqual(published, [
      {
        channel: 'reply:j1',
        outcome: { kind: 'outcome', job: 'j1', model: 'm', outcomes: [answer('a'), answer('b')] },
      },
    ]);
    assert.deepEqual(completed, [{ job: 'j1', token: 'worker-1' }]);
    assert.deepEqual(sink.jobIds(), ['j2'], 'j2 keeps its lock');
  });

  it('answers work started ahead of its fetch once the fetch brings its job, and drops it where the fetch did not', async () => {
    const { sink, job, published, completed } = harness();
    const started = job('j1', ['a']);
    let bring!: (brought: boolean) => void;
    const fetch = new Promise<boolean>((resolve) => (bring = resolve));
    sink.track([
      { ...started, job: fetch.then((brought) => (brought ? started.job : undefined)) },
      { ...job('j2', ['b']), job: Promise.resolve(undefined) },
    ]);
    sink.accept(request('a'), answer('a'));
    sink.accept(request('b'), answer('b'));
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(published.length, 0, 'j1 waits for its fetch; j2 was not fetched');
    bring(true);
    await sink.drain();
    assert.deepEqual(
      published.map((p) => p.outcome.job),
      ['j1'],
    );
    assert.deepEqual(completed, [{ job: 'j1', token: 'worker-1' }], 'j2 is left to the queue, to run when fetched');
  });

  it('tells each gateway that asks, once per batch started, which of its jobs were taken', () => {
    const { sink, job, taken } = harness();
    sink.track([job('j1', ['a']), job('j2', ['b'])]);
    sink.track([job('j3', ['c']), job('j4', ['d'])]);
    assert.deepEqual(taken, [], 'nothing is told at fetch');
    sink.sendTaken();
    sink.sendTaken();
    assert.deepEqual(taken, [
      { channel: 'reply:j1', message: { kind: 'taken', jobs: ['j1', 'j3'] } },
      { channel: 'reply:j2', message: { kind: 'taken', jobs: ['j2'] } },
    ]);
  });

  it('records an outcome too large for one message first, in a key of its own, then tells the gateway where it is', async () => {
    const { sink, job, stored, steps } = harness();
    const large = (id: string): RequestOutcome => ({
      id,
      ok: true,
      outputs: ['x'.repeat(OUTCOME_MESSAGE_MAX_BYTES)],
      warnings: [],
      timing: { queue_ms: 0, inference_ms: 0, batch_size: 1 },
    });
    sink.track([job('j1', ['a'])]);
    sink.accept(request('a'), large('a'));
    await sink.drain();
    assert.deepEqual(steps, ['set p:job-outcome:j1', 'complete j1 as recorded', 'publish recorded to reply:j1']);
    assert.deepEqual(
      stored.map(({ key, outcome, ms }) => ({ key, job: outcome.job, ms })),
      [{ key: 'p:job-outcome:j1', job: 'j1', ms: 15_000 }],
      'kept as long as its gateway keeps looking',
    );
  });

  it("forgets a request's cancellation once it is answered", () => {
    const { sink, job, cancellations } = harness();
    sink.track([job('j', ['a'])]);
    cancellations.note(notice(['a', 'elsewhere'], 10 ** 15));
    sink.accept(request('a'), answer('a'));
    assert.equal(cancellations.has('a'), false);
    assert.equal(cancellations.has('elsewhere'), true, 'held by another worker: kept until it is old');
  });
});

describe('Cancellations', () => {
  it('reads notices and refuses other messages', () => {
    const cancellations = new Cancellations(() => 0);
    assert.equal(cancellations.note('not json'), false);
    assert.equal(cancellations.note(JSON.stringify({ kind: 'cancel', ids: 'a', deadline: 1 })), false);
    assert.equal(cancellations.note(JSON.stringify({ ids: ['no kind'], deadline: 1 })), false);
    assert.equal(cancellations.note(notice(['a'], 10)), true);
    assert.equal(cancellations.has('a'), true);
  });

  it('remembers a notice heard again from its latest hearing, and still forgets the older ones', () => {
    let now = 0;
    const cancellations = new Cancellations(() => now);
    cancellations.note(notice(['again', 'once'], 10 ** 15));
    now += 6 * 60_000;
    cancellations.note(notice(['again'], 10 ** 15));
    now += 5 * 60_000;
    cancellations.note(notice(['latest'], 10 ** 15));
    assert.deepEqual(
      [cancellations.has('once'), cancellations.has('again'), cancellations.has('latest')],
      [false, true, true],
    );
  });

  it('forgets a notice once the deadline it names has passed, when its request would be dropped unrun anyway', () => {
    let now = 1_000;
    const cancellations = new Cancellations(() => now);
    cancellations.note(notice(['short'], 31_000));
    cancellations.note(notice(['far'], 10 ** 15));
    now = 30_999;
    cancellations.note(notice(['next'], 61_000));
    assert.deepEqual(
      [cancellations.has('short'), cancellations.has('far')],
      [true, true],
      'due only at its deadline, when the runner drops its request',
    );
    now = 31_000;
    cancellations.note(notice(['later'], 91_000));
    assert.equal(cancellations.has('short'), false);
    now += 10 * 60_000;
    cancellations.note(notice(['last'], now + 30_000));
    assert.deepEqual(
      [cancellations.has('far'), cancellations.has('next')],
      [false, false],
      'no notice is kept past ten minutes',
    );
  });
});
