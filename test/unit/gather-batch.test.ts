import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gatherBatch, topUp } from '../../apps/worker/src/pipeline/consumer.ts';
import type { JobSource } from '../../apps/worker/src/pipeline/jobs.ts';

/** A queue of job sizes, counting the calls a batch formation makes. */
function source(sizes: number[]) {
  const queue = [...sizes];
  const calls = { next: 0, waiting: 0, take: 0, taken: [] as number[] };
  const src: JobSource<number> = {
    next: async () => (calls.next++, queue.shift()),
    waiting: async () => (calls.waiting++, queue.length),
    take: async (n) => {
      calls.take++;
      calls.taken.push(n);
      return queue.splice(0, n);
    },
  };
  return { src, calls, queue };
}

describe('gatherBatch', () => {
  it('runs a lone job at once, with one length read and no fetch', async () => {
    const { src, calls } = source([1]);
    assert.deepEqual(await gatherBatch(src, { maxSize: 32, maxWaitMs: 20_000 }, (n) => n), [1]);
    assert.deepEqual({ waiting: calls.waiting, take: calls.take }, { waiting: 1, take: 0 });
  });

  it('fetches what waits in one round, up to the batch size', async () => {
    const { src, calls, queue } = source(Array(40).fill(1));
    const batch = await gatherBatch(src, { maxSize: 32, maxWaitMs: 1000 }, (n) => n);
    assert.equal(batch.length, 32);
    assert.deepEqual(calls.taken, [31]);
    assert.equal(queue.length, 8);
  });

  it('stops at the deadline: with 0 ms the first job goes alone', async () => {
    const { src, calls } = source([1, 1, 1]);
    assert.deepEqual(await gatherBatch(src, { maxSize: 32, maxWaitMs: 0 }, (n) => n), [1]);
    assert.equal(calls.waiting, 0);
  });

  it('sizes fetches by the jobs seen: coalesced jobs of 8 fill 32 in four', async () => {
    const { src, calls } = source(Array(10).fill(8));
    const batch = await gatherBatch(src, { maxSize: 32, maxWaitMs: 1000 }, (n) => n);
    assert.deepEqual(batch, [8, 8, 8, 8]);
    assert.deepEqual(calls.taken, [3]);
  });

  it('returns nothing when the source has no job (closing)', async () => {
    assert.deepEqual(await gatherBatch(source([]).src, { maxSize: 4, maxWaitMs: 10 }, (n) => n), []);
  });
});

describe('topUp', () => {
  it('reads the length only when there is room, and fetches nothing from an empty queue', async () => {
    const empty = source([]);
    assert.deepEqual(await topUp(empty.src, 10, 1), []);
    assert.equal(empty.calls.take, 0);
    const full = source([1, 1]);
    assert.deepEqual(await topUp(full.src, 0, 1), []);
    assert.equal(full.calls.waiting, 0);
  });
});
