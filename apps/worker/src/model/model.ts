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
import { TASKS, batchDependence, type Task } from '@tserve/contract';
import type { WorkerConfig } from '@tserve/config';
import { taskFromConfig, tasksServed } from './detect.js';
import {
  readSentenceTransformers,
  SentenceTransformersError,
  tokenizerLowercases,
  type SentenceHead,
  type SentenceTransformersFolder,
  type Splade,
} from './sentence-transformers.js';
import {
  checkDtypeFile,
  chooseDtype,
  DeviceChoiceError,
  isGpu,
  isNoAdapterError,
  noAdapterMessage,
  resolveDevice,
  type Device,
  type Dtype,
  type FileDtype,
} from './device.js';

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
  /** Named prompts (config_sentence_transformers.json): text put before an input that names one. */
  prompts: Record<string, string>;
  /** Put before an input that names no prompt ('' for none): DEFAULT_PROMPT, or the named default. */
  defaultPrompt: string;
  /** How its masked-LM logits pool into a sparse vector, for a model that serves them (POOLING, modules.json). */
  splade?: Splade;
  /** A sentence-transformers folder's modules after its transformer (modules.json): how its embedding is made. */
  sentence?: SentenceHead;
  /** Inputs are lower-cased before tokenizing (sentence_bert_config.json's do_lower_case, where the tokenizer does not). */
  lowercase: boolean;
  /** Where a batch's shorter sequences are padded: the tokenizer's own side (tokenizer_config.json's padding_side). */
  paddingSide: 'left' | 'right';
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
  const offset =
    config.model_type && POSITIONS_AFTER_PADDING.has(config.model_type) ? (config.pad_token_id ?? 1) + 1 : 0;
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

/** The folder of a MODEL_DIR model (a hub model's is its snapshot in the download cache). */
export function localModelFolder(modelDir: string, model: string): string {
  return path.join(path.resolve(modelDir), model);
}

/**
 * Points transformers.js at local files only; both threads call it before loading. A hub model
 * has been downloaded into a local folder by then (download.ts), so transformers.js never fetches.
 */
function configureLoading(): void {
  // The worker logs errors itself, once, without dumping input tensors.
  env.logLevel = LogLevel.NONE;
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  env.useFSCache = false;
}

function loadError(config: WorkerConfig, dir: string, err: unknown): ModelLoadError {
  if (err instanceof ModelLoadError) return err;
  const reason = err instanceof Error ? err.message : String(err);
  const device = resolveDevice(config.DEVICE);
  if (isGpu(device) && isNoAdapterError(reason)) {
    return new ModelLoadError(
      `cannot load model "${config.MODEL}": ${noAdapterMessage(device, reason.split('\n')[0].replace(/^.*?(Failed to get)/, '$1'))}`,
    );
  }
  return new ModelLoadError(
    `cannot load model "${config.MODEL}" (dtype ${config.DTYPE}, device ${config.DEVICE}) from ${dir}: ${reason}`,
  );
}

/** The device and dtype a worker runs, decided before loading; warnings are for the start-up log. */
export interface Runtime {
  device: Device;
  dtype: Dtype;
  warnings: string[];
  /** Why DTYPE=auto chose `dtype`. */
  reason?: string;
}

/** `dir`: the model's folder; its onnx/ files decide what DTYPE=auto loads. */
export function chooseRuntime(config: WorkerConfig, dir: string): Runtime {
  const device = resolveDevice(config.DEVICE);
  const onnx = path.join(dir, 'onnx');
  const available = fs.existsSync(onnx) ? fs.readdirSync(onnx) : [];
  try {
    const { dtype, warning, reason } = chooseDtype(config.DTYPE, device, available, config.DTYPE_FORCE);
    checkDtypeFile(config.MODEL, dtype, available);
    const warnings = [warning, batchDependence(dtype)].filter((w) => w !== undefined);
    return { device, dtype, warnings, ...(reason ? { reason } : {}) };
  } catch (err) {
    if (err instanceof DeviceChoiceError)
      throw new ModelLoadError(`cannot load model "${config.MODEL}": ${err.message}`);
    throw err;
  }
}

/** Config, task and tokenizer from the model's folder: everything but the session, for the main thread. */
export async function describeModel(config: WorkerConfig, dir: string): Promise<LoadedModel> {
  configureLoading();
  if (!fs.existsSync(path.join(dir, 'config.json'))) {
    throw new ModelLoadError(`cannot load model "${config.MODEL}": no config.json in ${dir}`);
  }
  try {
    const modelConfig = (await AutoConfig.from_pretrained(dir)) as unknown as ModelConfig;
    const folder = readFolder(config, dir);
    // A sentence-transformers folder is an embedding model whatever its architecture (Qwen3ForCausalLM).
    const task = (config.TASK ?? (folder.head ? 'feature-extraction' : taskFromConfig(modelConfig))) as
      Task | undefined;
    if (!task || !TASKS.includes(task)) {
      throw new ModelLoadError(
        `cannot serve model "${config.MODEL}": task ${task ? `"${task}"` : `unknown for architecture ${modelConfig.architectures?.[0] ?? '(none)'}`}` +
          `; set TASK to one of ${TASKS.join(', ')}`,
      );
    }
    const tokenizer = await AutoTokenizer.from_pretrained(dir);
    const positions = positionLimit(modelConfig);
    // sentence-transformers cuts at sentence_bert_config.json's max_seq_length where the folder has
    // one, else at the tokenizer's limit; tokenizers without a stated limit report a huge number,
    // and 512 is the BERT family's table.
    const own = tokenizer as unknown as { model_max_length?: number; padding_side?: string };
    const maxLength = Math.min(
      positions ?? Number.POSITIVE_INFINITY,
      folder.maxSeqLength ?? own.model_max_length ?? Number.POSITIVE_INFINITY,
    );
    const embedding = task === 'feature-extraction' || task === 'sentence-similarity';
    return {
      id: config.MODEL,
      task,
      tasks: tasksServed(task, modelConfig),
      tokenizer,
      config: modelConfig,
      maxLength: Number.isFinite(maxLength) ? maxLength : 512,
      positions,
      ...promptsAndPooling(config, task, folder),
      ...(folder.head && embedding ? { sentence: folder.head } : {}),
      lowercase: folder.doLowerCase === true && !tokenizerLowercases(tokenizer),
      paddingSide: own.padding_side === 'left' ? 'left' : 'right',
    };
  } catch (err) {
    throw loadError(config, dir, err);
  }
}

/** The folder's sentence-transformers files; a module that cannot be served fails the load, named. */
function readFolder(config: WorkerConfig, dir: string): SentenceTransformersFolder {
  try {
    return readSentenceTransformers(dir);
  } catch (err) {
    if (err instanceof SentenceTransformersError)
      throw new ModelLoadError(`cannot serve model "${config.MODEL}": ${err.message}`);
    throw err;
  }
}

/** The model's prompts, its default one, and its SPLADE pooling, from its folder and the settings that override it. */
function promptsAndPooling(
  config: WorkerConfig,
  task: Task,
  folder: SentenceTransformersFolder,
): Pick<LoadedModel, 'prompts' | 'defaultPrompt' | 'splade'> {
  const { prompts } = folder;
  if (config.DEFAULT_PROMPT !== undefined && config.DEFAULT_PROMPT_NAME !== undefined)
    throw new ModelLoadError('set DEFAULT_PROMPT or DEFAULT_PROMPT_NAME, not both');
  const name = config.DEFAULT_PROMPT_NAME ?? folder.defaultPromptName;
  if (name !== undefined && prompts[name] === undefined) {
    const known = Object.keys(prompts);
    throw new ModelLoadError(
      `cannot serve model "${config.MODEL}": its default prompt "${name}" is not one of its prompts${known.length ? ` (${known.join(', ')})` : ' (it has none: config_sentence_transformers.json)'}`,
    );
  }
  const splade =
    config.POOLING === 'splade' ? (folder.splade ?? { strategy: 'max', activation: 'relu' }) : folder.splade;
  if (splade && task !== 'fill-mask')
    throw new ModelLoadError(
      `cannot serve model "${config.MODEL}" with SPLADE pooling: it needs a masked-LM head (task fill-mask), and its task is ${task}`,
    );
  return {
    prompts,
    defaultPrompt: config.DEFAULT_PROMPT ?? (name !== undefined ? prompts[name] : ''),
    ...(splade ? { splade } : {}),
  };
}

/** ONNX Runtime's options for a worker's session (the bench runs the model as the workers do with them). */
export function sessionOptions(
  config: Pick<WorkerConfig, 'INTRA_OP_THREADS' | 'INTRA_OP_SPINNING'>,
): Record<string, unknown> {
  return {
    ...(config.INTRA_OP_THREADS > 0 ? { intraOpNumThreads: config.INTRA_OP_THREADS } : {}),
    // A memory pattern is one block for all of a call's tensors, planned the first time a shape runs
    // and taken whole from the CPU arena each time it runs again: it cannot reuse the pieces the
    // arena already holds, so under repeated shapes the arena grew far past the largest call. Without
    // it the arena stays near the largest call, which WORKER_MEMORY_MB reckons with, and calls were
    // no slower (docs/memory.md). The arena itself stays: without it every call was much slower.
    enableMemPattern: false,
    // Spinning shortens the steps of a model call; past its end it only burns cores, so the threads
    // stop spinning when the call returns (force_spinning_stop): an idle worker used most of a core.
    extra: {
      session: { intra_op: { allow_spinning: config.INTRA_OP_SPINNING ? '1' : '0' }, force_spinning_stop: '1' },
    },
  };
}

/** The file the model thread loads: transformers.js's own for a dtype, or another (int8-row) loaded as it loads fp32. */
export interface SessionFile {
  dtype: FileDtype;
  /** transformers.js's model_file_name: onnx/<fileName>.onnx. */
  fileName?: string;
}

/** The ONNX Runtime session from the model's folder, for the model thread. */
export async function loadSession(
  config: WorkerConfig,
  task: Task,
  dir: string,
  file: SessionFile,
): Promise<PreTrainedModel> {
  configureLoading();
  try {
    return await AUTO_CLASS[task].from_pretrained(dir, {
      dtype: file.dtype,
      ...(file.fileName ? { model_file_name: file.fileName } : {}),
      device: config.DEVICE,
      session_options: sessionOptions(config),
    });
  } catch (err) {
    throw loadError(config, dir, err);
  }
}
