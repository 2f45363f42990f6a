import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { colocatedWorkerSettings } from '../../apps/launcher/src/colocated.ts';

describe('npm start: settings of workers beside the gateway', () => {
  it('a lone worker yields and spins', () => {
    assert.deepEqual(colocatedWorkerSettings(1), { WORKER_NICE: '19', INTRA_OP_SPINNING: 'true' });
  });

  it('several workers yield and leave spinning at its default (off)', () => {
    for (const workers of [0, 2, 4]) assert.deepEqual(colocatedWorkerSettings(workers), { WORKER_NICE: '19' });
  });
});
