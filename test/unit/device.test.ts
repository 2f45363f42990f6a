import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { loadWorkerConfig } from '@tserve/config';
import {
  DeviceChoiceError,
  checkDtypeFile,
  chooseDtype,
  int8RowSource,
  isNoAdapterError,
  resolveDevice,
} from '../../apps/worker/src/model/device.ts';

const both = ['model.onnx', 'model_fp16.onnx'];

describe('device and dtype choice', () => {
  it('gpu means webgpu; cpu and cuda stay', () => {
    assert.equal(resolveDevice('gpu'), 'webgpu');
    assert.equal(resolveDevice('cuda'), 'cuda');
    assert.equal(resolveDevice('cpu'), 'cpu');
  });

  it('auto: on the CPU fp32 when the model has it, else q8; on a GPU fp16 when the model has it, else fp32', () => {
    // Never per-tensor q8 on a CPU: int8 per row, from fp32 where the model has it (int8RowSource).
    assert.equal(chooseDtype('auto', 'cpu', both, false).dtype, 'int8-row');
    assert.equal(chooseDtype('auto', 'cpu', ['model_quantized.onnx'], false).dtype, 'int8-row');
    // And says why, and what it costs against q8.
    assert.match(chooseDtype('auto', 'cpu', both, false).reason ?? '', /int8-row: .*batch mates.*q8/);
    assert.equal(int8RowSource(both), 'fp32');
    assert.equal(int8RowSource(['model_quantized.onnx']), 'q8');
    assert.throws(
      () => checkDtypeFile('m', 'int8-row', ['model_fp16.onnx']),
      /no onnx\/model.onnx or onnx\/model_quantized.onnx/,
    );
    assert.deepEqual(chooseDtype('auto', 'webgpu', both, false), { dtype: 'fp16' });
    assert.deepEqual(chooseDtype('auto', 'webgpu', ['model.onnx'], false), { dtype: 'fp32' });
    const hub = chooseDtype('auto', 'cuda', undefined, false);
    assert.equal(hub.dtype, 'fp32');
    assert.match(hub.warning!, /set DTYPE=fp16/);
  });

  it('refuses q8 on a GPU unless forced, and warns when forced', () => {
    assert.throws(
      () => chooseDtype('q8', 'webgpu', both, false),
      (err: Error) => err instanceof DeviceChoiceError && /DTYPE_FORCE=true/.test(err.message),
    );
    const forced = chooseDtype('q8', 'webgpu', both, true);
    assert.equal(forced.dtype, 'q8');
    assert.match(forced.warning!, /20-60x slower/);
    assert.deepEqual(chooseDtype('q8', 'cpu', undefined, false), { dtype: 'q8' });
  });

  it('names the files a model has when the requested one is missing', () => {
    assert.throws(
      () => checkDtypeFile('org/m', 'fp16', ['model_quantized.onnx', 'model.onnx']),
      /no onnx\/model_fp16\.onnx in org\/m for DTYPE=fp16; it has model\.onnx \(DTYPE=fp32\), model_quantized\.onnx \(DTYPE=q8\)/,
    );
    assert.doesNotThrow(() => checkDtypeFile('org/m', 'fp16', both));
    assert.doesNotThrow(() => checkDtypeFile('org/m', 'fp16', undefined));
  });

  it('recognises the errors of a machine without a GPU adapter', () => {
    assert.ok(isNoAdapterError('webgpu_context.cc:136 ... Failed to get a WebGPU adapter: No supported adapters'));
    assert.ok(!isNoAdapterError('input is 600 tokens long'));
  });

  it('batch limits follow the device unless set', () => {
    const base = { MODEL: 'org/m' };
    assert.deepEqual([loadWorkerConfig(base).BATCH_MAX_SIZE, loadWorkerConfig(base).BATCH_MAX_TOKENS], [32, 16384]);
    const gpu = loadWorkerConfig({ ...base, DEVICE: 'gpu' });
    assert.deepEqual([gpu.BATCH_MAX_SIZE, gpu.BATCH_MAX_TOKENS, gpu.DTYPE], [128, 65536, 'auto']);
    assert.equal(loadWorkerConfig({ ...base, DEVICE: 'webgpu', BATCH_MAX_SIZE: '64' }).BATCH_MAX_SIZE, 64);
    assert.throws(() => loadWorkerConfig({ ...base, DEVICE: 'tpu' }), /DEVICE/);
  });
});
