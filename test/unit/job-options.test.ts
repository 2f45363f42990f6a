import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { jobOptions, outcomesKeptMs } from '@tserve/queue';

describe('job options', () => {
  const kept = (resultPollMs: number) => jobOptions(resultPollMs).removeOnComplete;

  it("keep a completed job for five of the gateway's poll periods, and at least ten seconds", () => {
    assert.equal(kept(1000).age, 10);
    assert.equal(kept(20).age, 10);
    assert.equal(kept(3000).age, 15);
    assert.equal(kept(120_000).age, 600);
  });

  it("keep a direct request's stored outcome as long as a completed job's", () => {
    for (const pollMs of [20, 1000, 3000, 120_000]) assert.equal(outcomesKeptMs(pollMs), kept(pollMs).age * 1000);
  });

  it('keep a bounded number of completed jobs whatever their age, since each holds all its outcomes', () => {
    assert.equal(kept(1000).count, 1000);
    assert.equal(kept(120_000).count, 1000);
  });
});
