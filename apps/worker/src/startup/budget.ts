import type { Logger } from 'pino';
import type { WorkerConfig } from '@tserve/config';
import { ModelLoadError, type LoadedModel, type Runtime } from '../model/model.js';
import { limitsWithin, MemoryBudgetError, modelShape, restingBytes, type BudgetInput } from '../model/memory.js';
import { isGpu } from '../model/device.js';

/**
 * WORKER_MEMORY_MB, checked against the model before it loads: a budget that cannot hold the model
 * at rest fails now, with the reason, rather than after the load or in the kernel's OOM killer. A GPU
 * holds the call's tensors in its own memory, so there the budget bounds nothing.
 */
export function memoryBudget(
  config: WorkerConfig,
  defaulted: boolean,
  loaded: LoadedModel,
  runtime: Runtime,
  logger: Logger,
): BudgetInput | undefined {
  if (config.WORKER_MEMORY_MB === undefined) return undefined;
  if (isGpu(runtime.device)) {
    if (!defaulted)
      logger.warn(
        { device: runtime.device },
        'WORKER_MEMORY_MB bounds the model calls of CPU workers only; ignored on a GPU',
      );
    return undefined;
  }
  const shape = modelShape(loaded.config);
  if (!shape && defaulted) {
    logger.warn(
      'no memory budget: the model config names no hidden size, attention heads or layers; BATCH_MAX_TOKENS bounds its calls',
    );
    return undefined;
  }
  if (!shape) {
    throw new ModelLoadError(
      `cannot bound model "${config.MODEL}" by WORKER_MEMORY_MB: its config.json names no hidden size, attention heads or layers; unset WORKER_MEMORY_MB and bound its calls with BATCH_MAX_TOKENS`,
    );
  }
  const input = {
    budgetBytes: config.WORKER_MEMORY_MB * 2 ** 20,
    restingBytes: restingBytes(shape, runtime.dtype),
    shape,
    maxSize: config.BATCH_MAX_SIZE,
    maxPaddedTokens: config.BATCH_MAX_TOKENS,
    maxLength: loaded.maxLength,
    positions: loaded.positions,
  };
  boundedCalls(config.MODEL, input);
  return input;
}

/** The limits a budget sets; a budget too small for any call fails the worker as a load failure, with the reason. */
export function boundedCalls(model: string, input: BudgetInput): ReturnType<typeof limitsWithin> {
  try {
    return limitsWithin(input);
  } catch (err) {
    if (err instanceof MemoryBudgetError) throw new ModelLoadError(`cannot serve model "${model}": ${err.message}`);
    throw err;
  }
}
