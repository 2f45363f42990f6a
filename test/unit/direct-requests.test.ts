import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { goesDirect } from '../../apps/gateway/src/direct-requests.ts';

describe('goesDirect', () => {
  const job = (requests: number) => ({ requests: Array.from({ length: requests }, (_, i) => i) });

  it('sends one interactive request alone straight to a worker', () => {
    assert.equal(goesDirect('interactive', [job(1)]), true);
  });

  it('sends coalesced requests, several jobs and batch-class work as jobs', () => {
    assert.equal(goesDirect('interactive', [job(2)]), false);
    assert.equal(goesDirect('interactive', [job(1), job(1)]), false);
    assert.equal(goesDirect('batch', [job(1)]), false, 'batch class waits in the prioritized set, behind interactive work');
  });
});
