/**
 * Issue 11, what can be checked without a GPU: a worker asked for one on a machine without a GPU
 * adapter exits non-zero saying what to install, and the gateway reports the reason (503, /ready)
 * instead of a model that is not served. (On a machine with a GPU this test is skipped: the worker
 * would load. `npm run bench -- --device webgpu` is the check there.)
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { TestSystem, uniquePrefix, waitFor } from './helpers/system.ts';
import { CLASSIFIER as MODEL, DEFAULT_CLASSIFIER } from './helpers/replicas.ts';

const hasGpu = fs.existsSync('/dev/nvidia0') || fs.existsSync('/dev/dri/renderD128');

describe('GPU workers without a GPU', { skip: hasGpu ? 'this machine has a GPU' : false }, () => {
  const system = new TestSystem(uniquePrefix('no-gpu'));
  after(() => system.stop());

  it('DEVICE=webgpu: exits non-zero naming what to install; the gateway answers 503 with that reason', async () => {
    await system.startGateway();
    const worker = system.startWorker({ model: MODEL, env: { DEVICE: 'webgpu' } });
    const code = await worker.exited;
    assert.notEqual(code, 0);
    assert.match(worker.output, /no GPU adapter for DEVICE=webgpu/);
    assert.match(worker.output, /apt-get install libvulkan1/);
    assert.match(worker.output, /NVIDIA_DRIVER_CAPABILITIES to include graphics/);
    await waitFor(
      'the reason at the gateway',
      async () => {
        const r = await system.infer(MODEL, 'hello');
        return r.status === 503 && /no GPU adapter/.test(r.body.error);
      },
      10_000,
    );
    const ready = await fetch(`${system.url}/ready`);
    assert.equal(ready.status, 503);
    assert.match(JSON.stringify(await ready.json()), /no GPU adapter for DEVICE=webgpu/);
  });

  it('DTYPE=q8 on a GPU is refused at start-up unless forced, and a missing file is named', async () => {
    const q8 = system.startWorker({ model: MODEL, env: { DEVICE: 'gpu', DTYPE: 'q8' } });
    assert.notEqual(await q8.exited, 0);
    assert.match(q8.output, /DTYPE=q8 on webgpu: its integer kernels run on the CPU.*DTYPE_FORCE=true/);
    const missing = system.startWorker({ model: DEFAULT_CLASSIFIER, env: { DTYPE: 'fp16' } });
    assert.notEqual(await missing.exited, 0);
    assert.match(
      missing.output,
      /no onnx\/model_fp16\.onnx in replica\/MiniLM-L6-H384-uncased-sst2 for DTYPE=fp16; it has model_quantized\.onnx \(DTYPE=q8\)/,
    );
  });
});
