import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { JOB_OPTIONS, outcomesKeptMs } from '@tserve/queue';

describe('job options', () => {
  it("keep a completed job for five of the gateway's poll periods, and at least ten seconds", () => {
    assert.equal(outcomesKeptMs(1000), 10_000);
    assert.equal(outcomesKeptMs(20), 10_000);
    assert.equal(outcomesKeptMs(3000), 15_000);
    assert.equal(outcomesKeptMs(120_000), 600_000);
  });

  it('keep a bounded number of completed jobs whatever their age, since each holds all its outcomes', () => {
    assert.equal(JOB_OPTIONS.removeOnComplete.count, 1000);
  });
});
