import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import {
  decodeRecordedOutcome,
  OUTCOME_MESSAGE_MAX_BYTES,
  type InferenceJobData,
  type JobOutcome,
  type JobRecorded,
  type JobsTaken,
  type QueuedRequest,
  type RequestOutcome,
} from '@tserve/contract';
import { JobOutcomeSink, leastJsonBytes } from '../../apps/worker/src/outcome-sink.ts';
import { workOfDirect, workOfJob } from '../../apps/worker/src/work.ts';
import { Cancellations } from '../../apps/worker/src/cancellations.ts';

const request = (id: string): QueuedRequest => ({ id, inputs: ['x'], parameters: {}, deadline: 0, enqueuedAt: 0 });
const answer = (id: string): RequestOutcome => ({ id, ok: true, outputs: [id], warnings: [], timing: { queue_ms: 0, inference_ms: 0, batch_size: 1 } });

/** A sink over a publisher and jobs that record what they are asked to do. */
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
      stored.push({ key, outcome: decodeRecordedOutcome(Buffer.from(value)), px, ms });
    },
    publish: async (channel: string, message: string) => {
      const parsed = JSON.parse(message) as JobOutcome | JobsTaken | JobRecorded;
      steps.push(`publish ${'taken' in parsed ? 'taken' : 'recorded' in parsed ? 'recorded' : 'outcome'} to ${channel}`);
      if ('taken' in parsed) taken.push({ channel, message: parsed });
      else if ('outcomes' in parsed) published.push({ channel, outcome: parsed });
      return 1;
    },
  };
  const job = (id: string, requests: string[]) =>
    workOfJob({
      id,
      opts: {},
      // j3 comes from j1's gateway; j4 from a gateway too old to ask to be told.
      data: { requests: requests.map(request), replyTo: id === 'j3' ? 'reply:j1' : `reply:${id}`, tellTaken: id !== 'j4', keepMs: 15_000 },
      moveToCompleted: async (result: JobOutcome | JobRecorded, token: string) => {
        steps.push(`complete ${id} ${'recorded' in result ? 'as recorded' : 'with the outcome'}`);
        completed.push({ job: id, token });
      },
    } as unknown as Job<InferenceJobData>);
  const silent = { debug() {}, warn() {} } as unknown as Logger;
  const cancellations = new Cancellations();
  const sink = new JobOutcomeSink(publisher as unknown as Redis, cancellations, { prefix: 'p', model: 'm', token: 'worker-1' }, silent);
  return { sink, job, published, completed, stored, taken, cancellations, steps };
}

describe('JobOutcomeSink', () => {
  it("settles a job once, with its last outcome, the outcomes in the job's order", async () => {
    const { sink, job, published, completed } = harness();
    sink.hold([job('j1', ['a', 'b']), job('j2', ['c'])]);
    assert.deepEqual(sink.heldJobIds(), ['j1', 'j2']);
    sink.record(request('b'), answer('b'));
    assert.equal(published.length, 0, 'j1 still waits for a');
    sink.record(request('a'), answer('a'));
    sink.record(request('a'), answer('a'));
    sink.record(request('unknown'), answer('unknown'));
    await sink.drain();
    assert.deepEqual(published, [{ channel: 'reply:j1', outcome: { job: 'j1', model: 'm', outcomes: [answer('a'), answer('b')] } }]);
    assert.deepEqual(completed, [{ job: 'j1', token: 'worker-1' }]);
    assert.deepEqual(sink.heldJobIds(), ['j2'], 'j2 keeps its lock');
  });

  it('tells each gateway that asks, once per batch started, which of its jobs were taken', () => {
    const { sink, job, taken } = harness();
    sink.hold([job('j1', ['a']), job('j2', ['b'])]);
    sink.hold([job('j3', ['c']), job('j4', ['d'])]);
    assert.deepEqual(taken, [], 'nothing is told at fetch');
    sink.tellTaken();
    sink.tellTaken();
    assert.deepEqual(taken, [
      { channel: 'reply:j1', message: { taken: ['j1', 'j3'] } },
      { channel: 'reply:j2', message: { taken: ['j2'] } },
    ]);
  });

  it("settles a direct request in its state key, for the gateway's fallback read; it holds no lock to renew", async () => {
    const { sink, job, published, completed, stored, taken } = harness();
    sink.hold([workOfDirect({ request: request('d'), replyTo: 'reply:g', keepMs: 12_000 }), job('j1', ['a'])]);
    assert.deepEqual(sink.heldJobIds(), ['j1']);
    sink.tellTaken();
    assert.deepEqual(taken[0], { channel: 'reply:g', message: { taken: ['d'] } }, 'its gateway hears it was taken, like a job');
    sink.record(request('d'), answer('d'));
    await sink.drain();
    const outcome = { job: 'd', model: 'm', outcomes: [answer('d')] };
    assert.deepEqual(published, [{ channel: 'reply:g', outcome }]);
    assert.deepEqual(stored, [{ key: 'p:direct-state:d', outcome, px: 'PX', ms: 12_000 }]);
    assert.deepEqual(completed, [], 'no BullMQ job to complete');
  });

  it('records an outcome too large for one message first, then tells the gateway where it is; a job’s in a key of its own', async () => {
    const { sink, job, stored, steps } = harness();
    const large = (id: string): RequestOutcome => ({
      id,
      ok: true,
      outputs: ['x'.repeat(OUTCOME_MESSAGE_MAX_BYTES)],
      warnings: [],
      timing: { queue_ms: 0, inference_ms: 0, batch_size: 1 },
    });
    sink.hold([job('j1', ['a']), workOfDirect({ request: request('d'), replyTo: 'reply:g', keepMs: 12_000 })]);
    sink.record(request('a'), large('a'));
    await sink.drain();
    sink.record(request('d'), large('d'));
    await sink.drain();
    assert.deepEqual(steps, [
      'set p:job-outcome:j1',
      'complete j1 as recorded',
      'publish recorded to reply:j1',
      'set p:direct-state:d',
      'publish recorded to reply:g',
    ]);
    assert.deepEqual(
      stored.map(({ key, outcome, ms }) => ({ key, job: outcome.job, ms })),
      [
        { key: 'p:job-outcome:j1', job: 'j1', ms: 15_000 },
        { key: 'p:direct-state:d', job: 'd', ms: 12_000 },
      ],
      'kept as long as its gateway keeps looking',
    );
  });

  it("forgets a request's cancellation once it is answered", () => {
    const { sink, job, cancellations } = harness();
    sink.hold([job('j', ['a'])]);
    cancellations.note(JSON.stringify({ ids: ['a', 'elsewhere'] }));
    sink.record(request('a'), answer('a'));
    assert.equal(cancellations.has('a'), false);
    assert.equal(cancellations.has('elsewhere'), true, 'held by another worker: kept until it is old');
  });
});

describe('Cancellations', () => {
  it('reads notices, refuses other messages, and forgets notices older than any deadline', () => {
    let now = 0;
    const cancellations = new Cancellations(() => now);
    assert.equal(cancellations.note('not json'), false);
    assert.equal(cancellations.note('{"ids":"a"}'), false);
    assert.equal(cancellations.note(JSON.stringify({ ids: ['old'] })), true);
    now += 11 * 60_000;
    cancellations.note(JSON.stringify({ ids: ['new'] }));
    assert.deepEqual([cancellations.has('old'), cancellations.has('new')], [false, true]);
  });

  it('remembers a notice heard again from its latest hearing, and still forgets the older ones', () => {
    let now = 0;
    const cancellations = new Cancellations(() => now);
    cancellations.note(JSON.stringify({ ids: ['again', 'once'] }));
    now += 6 * 60_000;
    cancellations.note(JSON.stringify({ ids: ['again'] }));
    now += 5 * 60_000;
    cancellations.note(JSON.stringify({ ids: ['latest'] }));
    assert.deepEqual([cancellations.has('once'), cancellations.has('again'), cancellations.has('latest')], [false, true, true]);
  });
  it('forgets a notice once the deadline it names has passed, when its request would be dropped unrun anyway', () => {
    let now = 1_000;
    const cancellations = new Cancellations(() => now);
    cancellations.note(JSON.stringify({ ids: ['short'], deadline: 31_000 }));
    cancellations.note(JSON.stringify({ ids: ['far'], deadline: 10 ** 15 }));
    now = 30_999;
    cancellations.note(JSON.stringify({ ids: ['next'], deadline: 61_000 }));
    assert.deepEqual([cancellations.has('short'), cancellations.has('far')], [true, true], 'due only at its deadline, when the runner drops its request');
    now = 31_000;
    cancellations.note(JSON.stringify({ ids: ['later'], deadline: 91_000 }));
    assert.equal(cancellations.has('short'), false);
    now += 10 * 60_000;
    cancellations.note(JSON.stringify({ ids: ['last'], deadline: now + 30_000 }));
    assert.deepEqual([cancellations.has('far'), cancellations.has('next')], [false, false], 'no notice is kept past ten minutes');
  });
});

describe('leastJsonBytes', () => {
  it('never counts more bytes than the JSON takes, so an outcome it calls too large is', () => {
    const values: unknown[] = [
      0,
      -1.5e-7,
      null,
      true,
      '',
      '日本語 😀',
      [],
      {},
      [[0.25, 1], [2]],
      { label: 'POSITIVE', score: 0.99 },
      [{ a: [1, 'x'] }, null],
      { skipped: undefined },
    ];
    for (const value of values) {
      assert.ok(leastJsonBytes(value, Infinity) <= Buffer.byteLength(JSON.stringify(value)), JSON.stringify(value));
    }
  });

  it('stops counting once past the limit', () => {
    const vectors = Array.from({ length: 512 }, () => new Array<number>(384).fill(0.123));
    const counted = leastJsonBytes(vectors, 10_000);
    assert.ok(counted > 10_000 && counted < 20_000, String(counted));
  });
});
