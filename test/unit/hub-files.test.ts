import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { loadWorkerConfig } from '@tserve/config';
import { hubFilePlan } from '../../apps/worker/src/model/hub-files.ts';
import { MODEL_DIR } from '../helpers/processes.ts';

const bertConfig = JSON.parse(
  fs.readFileSync(path.join(MODEL_DIR, 'replica/tiny-bert-sst2/config.json'), 'utf8'),
) as Record<string, unknown>;
const plan = (env: Record<string, string>, config = bertConfig, onServer: string[] = []) => {
  const asked: string[] = [];
  const has = (file: string) => {
    asked.push(file);
    return Promise.resolve(onServer.includes(file));
  };
  return hubFilePlan(loadWorkerConfig({ MODEL: 'org/model', ...env }))(config, has).then((files) => ({
    ...files,
    asked,
  }));
};

describe('which files a worker fetches from the hub', () => {
  it("a DTYPE named: the weights of that dtype, asking the server nothing; a sentence-transformers folder's prompts, modules and their configs where present", async () => {
    const optional = [
      'config_sentence_transformers.json',
      'modules.json',
      'sentence_bert_config.json',
      '1_Pooling/config.json',
      '2_Dense/config.json',
      '3_Dense/config.json',
      '4_Dense/config.json',
      '1_SpladePooling/config.json',
    ];
    assert.deepEqual(await plan({ DTYPE: 'q8' }), { required: ['onnx/model_quantized.onnx'], optional, asked: [] });
    assert.deepEqual(await plan({ DTYPE: 'fp32' }), { required: ['onnx/model.onnx'], optional, asked: [] });
  });

  it('DTYPE=auto on the CPU: int8-row from fp32 where the server has it, else from q8, and fp32 named missing where it has neither', async () => {
    const both = await plan({}, bertConfig, ['onnx/model.onnx', 'onnx/model_quantized.onnx']);
    assert.deepEqual([both.required, both.asked], [['onnx/model.onnx'], ['onnx/model.onnx']]);
    const q8 = await plan({}, bertConfig, ['onnx/model_quantized.onnx']);
    assert.deepEqual(
      [q8.required, q8.asked],
      [['onnx/model_quantized.onnx'], ['onnx/model.onnx', 'onnx/model_quantized.onnx']],
    );
    assert.deepEqual((await plan({}, bertConfig, [])).required, ['onnx/model.onnx']);
  });

  it('DTYPE=auto on a GPU: fp16 where the server has it, else fp32', async () => {
    const withFp16 = await plan({ DEVICE: 'gpu' }, bertConfig, ['onnx/model_fp16.onnx', 'onnx/model.onnx']);
    assert.deepEqual([withFp16.required, withFp16.asked], [['onnx/model_fp16.onnx'], ['onnx/model_fp16.onnx']]);
    assert.deepEqual((await plan({ DEVICE: 'webgpu' }, bertConfig, ['onnx/model.onnx'])).required, ['onnx/model.onnx']);
  });

  it('q8 on a GPU is refused before anything is downloaded', async () => {
    await assert.rejects(plan({ DEVICE: 'gpu', DTYPE: 'q8' }), /DTYPE=q8 on webgpu/);
  });

  it('weights split into external data come with their data files', async () => {
    const config = { ...bertConfig, 'transformers.js_config': { use_external_data_format: { 'model.onnx': 2 } } };
    assert.deepEqual((await plan({ DTYPE: 'fp32' }, config)).required, [
      'onnx/model.onnx',
      'onnx/model.onnx_data',
      'onnx/model.onnx_data_1',
    ]);
  });
});
