import path from 'node:path';
import { ModelRegistry } from '@huggingface/transformers';
import type { WorkerConfig } from '@tserve/config';
import { ModelLoadError } from './model.js';
import { SENTENCE_TRANSFORMERS_FILES } from './sentence-transformers.js';
import {
  chooseDtype,
  DeviceChoiceError,
  dtypeFile,
  int8RowSource,
  isGpu,
  resolveDevice,
  type Dtype,
} from './device.js';

/** The files a model needs, decided from its config.json and what the server (or the cache) holds. */
interface FilePlan {
  required: string[];
  /** Loaded when present (transformers.js reads them without failing when absent). */
  optional: string[];
}

export type PlanFiles = (
  modelConfig: Record<string, unknown>,
  has: (file: string) => Promise<boolean>,
) => Promise<FilePlan>;

/**
 * The files a hub model needs for this worker's device and dtype, as transformers.js will read
 * them: the weights file (and its external data) that `ModelRegistry.get_model_files` names, and
 * the optional configs it may read. `has` says whether the server holds a file: DTYPE=auto takes
 * fp16 on a GPU and fp32 on a CPU where the model has it.
 */
export function hubFilePlan(config: WorkerConfig): PlanFiles {
  return async (modelConfig, has) => {
    const device = resolveDevice(config.DEVICE);
    // DTYPE=auto takes the file the device prefers where the server holds it (chooseDtype).
    const [preferred, fallback] = isGpu(device)
      ? [dtypeFile('fp16'), dtypeFile('fp32')]
      : [dtypeFile('fp32'), dtypeFile('q8')];
    // Where the server (or, offline, the cache) has neither, the preferred file is the one named missing.
    const available =
      config.DTYPE === 'auto' ? [(await has(preferred)) || !(await has(fallback)) ? preferred : fallback] : undefined;
    let chosen: Dtype;
    try {
      chosen = chooseDtype(
        config.DTYPE,
        device,
        available?.map((f) => path.basename(f)),
        config.DTYPE_FORCE,
      ).dtype;
    } catch (err) {
      if (err instanceof DeviceChoiceError)
        throw new ModelLoadError(`cannot load model "${config.MODEL}": ${err.message}`);
      throw err;
    }
    // int8-row is written here from the fp32 file where the server has it, else from the q8 one.
    const held = async () => available ?? [(await has(dtypeFile('fp32'))) ? dtypeFile('fp32') : dtypeFile('q8')];
    const dtype = chosen === 'int8-row' ? int8RowSource((await held()).map((f) => path.basename(f))) : chosen;
    const files = await ModelRegistry.get_model_files(config.MODEL, {
      config: modelConfig as never,
      dtype,
      device,
    });
    const weights = files.filter((f) => f.startsWith('onnx/'));
    return {
      required: weights,
      optional: [...files.filter((f) => f !== 'config.json' && !weights.includes(f)), ...SENTENCE_TRANSFORMERS_FILES],
    };
  };
}
