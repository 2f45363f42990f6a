import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { goesDirect } from '../../apps/gateway/src/direct-requests.ts';

describe('goesDirect', () => {
  const job = (requests: number) => ({ requests: Array.from({ length: requests }, (_, i) => i) });

  it('sends interactive jobs as entries to workers that read entries of several requests', () => {
    assert.equal(goesDirect('interactive', [job(1)], 'groups'), true);
    assert.equal(goesDirect('interactive', [job(7)], 'groups'), true);
    assert.equal(goesDirect('interactive', [job(32), job(3)], 'groups'), true, 'one entry per job');
  });

  it('sends only a lone request directly to workers of the release before', () => {
    assert.equal(goesDirect('interactive', [job(1)], 'lone'), true);
    assert.equal(goesDirect('interactive', [job(2)], 'lone'), false, 'they read one request per entry');
    assert.equal(goesDirect('interactive', [job(1), job(1)], 'lone'), false);
  });

  it('sends batch-class work, and anything for workers that take no entries, as jobs', () => {
    assert.equal(goesDirect('batch', [job(1)], 'groups'), false, 'batch class waits in the prioritized set, behind interactive work');
    assert.equal(goesDirect('interactive', [job(1)], undefined), false);
  });
});
