import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Job } from 'bullmq';
import type { InferenceJobData, QueuedRequest } from '@tserve/contract';
import { outcomesKeptMs } from '@tserve/queue';
import { workOfDirect, workOfJob } from '../../apps/worker/src/work.ts';

const request = (id: string): QueuedRequest => ({ id, inputs: ['a text'], parameters: {}, deadline: 2_000_000_000_000, enqueuedAt: 1 });

describe('workOfDirect', () => {
  it('reads an entry of several requests under its own id', () => {
    const work = workOfDirect({ id: 'a', requests: [request('a'), request('b')], replyTo: 'gw', keepMs: 10_000 });
    assert.deepEqual(
      { id: work.id, requests: work.requests.map((r) => r.id), replyTo: work.replyTo, tellTaken: work.tellTaken, bulk: work.bulk, keepMs: work.keepMs },
      { id: 'a', requests: ['a', 'b'], replyTo: 'gw', tellTaken: true, bulk: false, keepMs: 10_000 },
      'an entry that does not say (an older gateway) wants to hear it was taken',
    );
  });

  it('tells that an entry was taken only if it asks', () => {
    const entry = (tellTaken: boolean) => ({ id: 'a', requests: [request('a')], replyTo: 'gw', keepMs: 10_000, tellTaken });
    assert.equal(workOfDirect(entry(false)).tellTaken, false);
    assert.equal(workOfDirect(entry(true)).tellTaken, true);
  });

  it("reads the one-request entry of the release before, under its request's id", () => {
    const work = workOfDirect({ request: request('x'), replyTo: 'gw', keepMs: 5000 });
    assert.deepEqual(
      { id: work.id, requests: work.requests.map((r) => r.id), keepMs: work.keepMs, tellTaken: work.tellTaken },
      { id: 'x', requests: ['x'], keepMs: 5000, tellTaken: true },
    );
  });
});

describe('workOfJob', () => {
  const job = (data: Partial<InferenceJobData>) =>
    workOfJob({ id: 'j', opts: {}, data: { requests: [request('a')], replyTo: 'gw', ...data } } as unknown as Job<InferenceJobData>);

  it('keeps outcomes recorded apart from the job as long as its gateway says; an older gateway’s for its default poll’s period', () => {
    assert.equal(job({ keepMs: 25_000 }).keepMs, 25_000);
    assert.equal(job({}).keepMs, outcomesKeptMs(1000));
  });
});
