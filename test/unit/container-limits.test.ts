import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  cpuMaxFromV1,
  defaultWorkerMemoryMiB,
  memoryLimitBytes,
  UNLIMITED_WORKER_MEMORY_MIB,
  usableCpus,
} from '../../apps/worker/src/model/container-limits.ts';

describe('container limits', () => {
  it('threads: the CPU quota rounded down, at least one, never above the affinity mask', () => {
    assert.equal(usableCpus('150000 100000\n', 16), 1);
    assert.equal(usableCpus('100000 100000\n', 16), 1);
    assert.equal(usableCpus('400000 100000\n', 16), 4);
    assert.equal(usableCpus('50000 100000\n', 16), 1);
    assert.equal(usableCpus('800000 100000\n', 2), 2);
  });
  it('threads: the affinity mask where no quota is set or the file is absent', () => {
    assert.equal(usableCpus('max 100000\n', 6), 6);
    assert.equal(usableCpus(undefined, 3), 3);
    assert.equal(usableCpus('', 3), 3);
  });
  it('memory: the limit in bytes, none for "max" or no file', () => {
    assert.equal(memoryLimitBytes('1342177280\n'), 1342177280);
    assert.equal(memoryLimitBytes('max\n'), undefined);
    assert.equal(memoryLimitBytes(undefined), undefined);
  });
  it('cgroup v1: the quota and period files as cpu.max says them, and its "no limit" memory figure as none', () => {
    assert.equal(usableCpus(cpuMaxFromV1('200000\n', '100000\n'), 16), 2);
    assert.equal(usableCpus(cpuMaxFromV1('-1\n', '100000\n'), 6), 6);
    assert.equal(cpuMaxFromV1(undefined, undefined), undefined);
    assert.equal(memoryLimitBytes('9223372036854771712\n'), undefined);
    assert.equal(memoryLimitBytes('1073741824\n'), 1073741824);
  });
  it('WORKER_MEMORY_MB by default: a quarter under the limit, or the measured default without one', () => {
    assert.equal(defaultWorkerMemoryMiB(1280 * 2 ** 20), 1024);
    assert.equal(defaultWorkerMemoryMiB(undefined), UNLIMITED_WORKER_MEMORY_MIB);
  });
});
