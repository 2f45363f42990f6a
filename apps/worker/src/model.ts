import path from 'node:path';
import fs from 'node:fs';
import {
  env,
  AutoConfig,
  AutoTokenizer,
  AutoModel,
  AutoModelForSequenceClassification,
  AutoModelForMaskedLM,
  AutoModelForTokenClassification,
  AutoModelForQuestionAnswering,
  LogLevel,
  type PreTrainedModel,
  type PreTrainedTokenizer,
} from '@huggingface/transformers';
import { TASKS, type Task } from '@tserve/contract';
import type { WorkerConfig } from '@tserve/config';
import { taskFromConfig, tasksServed } from './tasks/detect.js';
import { checkDtypeFile, chooseDtype, DeviceChoiceError, isGpu, isNoAdapterError, noAdapterMessage, resolveDevice, type Device, type Dtype } from './device.js';

/** What the worker's main thread knows of its model; the session itself lives in the model thread. */
export interface LoadedModel {
  id: string;
  /** The task requests that name none get. */
  task: Task;
  /** Every task it can serve (its own first). */
  tasks: Task[];
  tokenizer: PreTrainedTokenizer;
  config: ModelConfig;
  /** Longest sequence (special tokens included) the model and its tokenizer accept: what truncation cuts to. */
  maxLength: number;
  /** Longest sequence its position table can index (undefined: the config does not say); a longer one surely fails. */
  positions: number | undefined;
}

export interface ModelConfig {
  architectures?: string[];
  id2label?: Record<string, string>;
  label2id?: Record<string, number>;
  problem_type?: string;
  max_position_embeddings?: number;
  model_type?: string;
  pad_token_id?: number;
  [key: string]: unknown;
}

// These number positions from after the padding index (transformers' create_position_ids_from_input_ids),
// so the table's first pad_token_id + 1 rows are never a token's: a 514-row table holds 512 tokens.
const POSITIONS_AFTER_PADDING = new Set(['roberta', 'xlm-roberta', 'camembert']);

/** The longest sequence a model's position table can index, as TEI reckons it; undefined where the config is silent. */
export function positionLimit(config: ModelConfig): number | undefined {
  const table = config.max_position_embeddings;
  if (table === undefined) return undefined;
  const offset = config.model_type && POSITIONS_AFTER_PADDING.has(config.model_type) ? (config.pad_token_id ?? 1) + 1 : 0;
  return table - offset;
}

export class ModelLoadError extends Error {}

const AUTO_CLASS: Record<Task, { from_pretrained: typeof AutoModel.from_pretrained }> = {
  'text-classification': AutoModelForSequenceClassification,
  'zero-shot-classification': AutoModelForSequenceClassification,
  'fill-mask': AutoModelForMaskedLM,
  'token-classification': AutoModelForTokenClassification,
  'question-answering': AutoModelForQuestionAnswering,
  'feature-extraction': AutoModel,
  'sentence-similarity': AutoModel,
};

function where(config: WorkerConfig): string {
  return config.MODEL_DIR ? path.join(path.resolve(config.MODEL_DIR), config.MODEL) : `the Hugging Face hub (${config.MODEL})`;
}

/** Points transformers.js at MODEL_DIR (offline) or the hub; both threads call it before loading. */
function configureLoading(config: WorkerConfig): void {
  // The worker logs errors itself, once, without dumping input tensors.
  env.logLevel = LogLevel.NONE;
  if (config.MODEL_DIR) {
    env.allowRemoteModels = false;
    env.allowLocalModels = true;
    env.localModelPath = path.resolve(config.MODEL_DIR);
  }
}

function loadError(config: WorkerConfig, err: unknown): ModelLoadError {
  if (err instanceof ModelLoadError) return err;
  const reason = err instanceof Error ? err.message : String(err);
  const device = resolveDevice(config.DEVICE);
  if (isGpu(device) && isNoAdapterError(reason)) {
    return new ModelLoadError(`cannot load model "${config.MODEL}": ${noAdapterMessage(device, reason.split('\n')[0].replace(/^.*?(Failed to get)/, '$1'))}`);
  }
  return new ModelLoadError(`cannot load model "${config.MODEL}" (dtype ${config.DTYPE}, device ${config.DEVICE}) from ${where(config)}: ${reason}`);
}

/** The device and dtype a worker runs, decided before loading; warnings are for the start-up log. */
export interface Runtime {
  device: Device;
  dtype: Dtype;
  warnings: string[];
}

export function chooseRuntime(config: WorkerConfig): Runtime {
  const device = resolveDevice(config.DEVICE);
  const onnx = config.MODEL_DIR ? path.join(path.resolve(config.MODEL_DIR), config.MODEL, 'onnx') : undefined;
  const available = onnx ? (fs.existsSync(onnx) ? fs.readdirSync(onnx) : []) : undefined;
  try {
    const { dtype, warning } = chooseDtype(config.DTYPE, device, available, config.DTYPE_FORCE);
    checkDtypeFile(config.MODEL, dtype, available);
    return { device, dtype, warnings: warning ? [warning] : [] };
  } catch (err) {
    if (err instanceof DeviceChoiceError) throw new ModelLoadError(`cannot load model "${config.MODEL}": ${err.message}`);
    throw err;
  }
}

/** Config, task and tokenizer: everything but the session, for the main thread. */
export async function describeModel(config: WorkerConfig): Promise<LoadedModel> {
  configureLoading(config);
  if (config.MODEL_DIR) {
    const dir = path.join(path.resolve(config.MODEL_DIR), config.MODEL);
    if (!fs.existsSync(path.join(dir, 'config.json'))) {
      throw new ModelLoadError(`cannot load model "${config.MODEL}": no config.json in ${dir}`);
    }
  }
  try {
    const modelConfig = (await AutoConfig.from_pretrained(config.MODEL)) as unknown as ModelConfig;
    const task = (config.TASK ?? taskFromConfig(modelConfig)) as Task | undefined;
    if (!task || !TASKS.includes(task)) {
      throw new ModelLoadError(
        `cannot serve model "${config.MODEL}": task ${task ? `"${task}"` : `unknown for architecture ${modelConfig.architectures?.[0] ?? '(none)'}`}` +
          `; set TASK to one of ${TASKS.join(', ')}`,
      );
    }
    const tokenizer = await AutoTokenizer.from_pretrained(config.MODEL);
    const positions = positionLimit(modelConfig);
    // Tokenizers without a stated limit report a huge number; 512 is the BERT family's table.
    const maxLength = Math.min(
      positions ?? Number.POSITIVE_INFINITY,
      (tokenizer as unknown as { model_max_length?: number }).model_max_length ?? Number.POSITIVE_INFINITY,
    );
    return {
      id: config.MODEL,
      task,
      tasks: tasksServed(task, modelConfig),
      tokenizer,
      config: modelConfig,
      maxLength: Number.isFinite(maxLength) ? maxLength : 512,
      positions,
    };
  } catch (err) {
    throw loadError(config, err);
  }
}

/** ONNX Runtime's options for a worker's session (the bench runs the model as the workers do with them). */
export function sessionOptions(config: Pick<WorkerConfig, 'INTRA_OP_THREADS' | 'INTRA_OP_SPINNING'>): Record<string, unknown> {
  return {
    ...(config.INTRA_OP_THREADS > 0 ? { intraOpNumThreads: config.INTRA_OP_THREADS } : {}),
    extra: { session: { intra_op: { allow_spinning: config.INTRA_OP_SPINNING ? '1' : '0' } } },
  };
}

/** The ONNX Runtime session, for the model thread. */
export async function loadSession(config: WorkerConfig, task: Task): Promise<PreTrainedModel> {
  configureLoading(config);
  try {
    return await AUTO_CLASS[task].from_pretrained(config.MODEL, {
      dtype: config.DTYPE,
      device: config.DEVICE,
      session_options: sessionOptions(config),
    });
  } catch (err) {
    throw loadError(config, err);
  }
}
