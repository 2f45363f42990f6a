import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { colocatedWorkerSettings, threadsBeside } from '../../apps/launcher/src/colocated.ts';

describe('npm start: settings of workers beside the gateway', () => {
  it('workers yield, share the cores between them, and do not spin', () => {
    assert.deepEqual(colocatedWorkerSettings(1, 2), { WORKER_NICE: '19', INTRA_OP_THREADS: '2' });
    assert.deepEqual(colocatedWorkerSettings(2, 2), { WORKER_NICE: '19', INTRA_OP_THREADS: '1' });
    assert.deepEqual(colocatedWorkerSettings(4, 16), { WORKER_NICE: '19', INTRA_OP_THREADS: '4' });
    assert.deepEqual(colocatedWorkerSettings(3, 16), { WORKER_NICE: '19', INTRA_OP_THREADS: '5' });
  });

  it('gives every worker one thread at least, however many share the cores', () => {
    assert.equal(threadsBeside(1, 1), 1);
    assert.equal(threadsBeside(8, 4), 1);
    assert.equal(threadsBeside(0, 4), 4);
  });
});
