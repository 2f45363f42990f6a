import { z } from 'zod';
import type { Task } from './schemas.js';
import type { DefaultScoreFunction } from './score-functions.js';
import type { InferenceStats } from './inference-stats.js';

/**
 * A worker's announcement, the one message of the wire (wire.ts) that is not about a job: every
 * worker writes it to Redis each heartbeat, and it carries PROTOCOL like a job does.
 */

/** What a worker announces in Redis (its heartbeat); the gateway learns the served models from these alone. */
export interface WorkerInfo {
  kind: 'worker';
  /** The wire version it speaks (PROTOCOL): a gateway of another number sends it nothing. */
  protocol: number;
  id: string;
  model: string;
  /**
   * A worker announces itself while it loads its model, so that the gateway can say so (503 loading,
   * not 404). One that is stopping (`draining`) takes nothing new and finishes what it holds.
   */
  state: 'loading' | 'ready' | 'draining';
  /** Known once the model's config is read: the task its architecture was trained for. */
  task?: Task;
  /** Every task the model can serve (an embedding model also serves sentence-similarity). */
  tasks?: Task[];
  /** The classifier's labels in output order, for classification models. */
  labels?: string[];
  /** The model serves sparse vectors (embed-sparse): a masked-LM model with SPLADE pooling. */
  sparse?: true;
  /** The names of an embedding model's prompts (config_sentence_transformers.json), which a request's prompt_name picks from. */
  promptNames?: string[];
  /** The sizes its vectors may be shortened to (MATRYOSHKA_DIMENSIONS), largest first. */
  matryoshkaDimensions?: number[];
  /** The function text-classification applies to the logits when a request names none. */
  scoreFunction?: DefaultScoreFunction;
  dtype: string;
  device: string;
  pid: number;
  host: string;
  startedAt: number;
  batchMaxSize: number;
  /** Padded tokens one model call may hold (BATCH_MAX_TOKENS). */
  batchMaxTokens: number;
  /** Longest sequence the model accepts, in tokens. */
  maxTokens: number;
  /** Milliseconds the model has spent in calls since the worker started: its rate is the share of time the model computed. */
  modelBusyMs?: number;
  /** The model's files this start downloads from the hub or a mirror (`state` stays `loading`); absent when none were needed. */
  download?: ModelDownload;
  /** The hub revision loaded: the commit id where the hub named one, else the revision asked for; absent for a local folder. */
  revision?: string;
  /** sha256 (hex) of the ONNX weights file loaded, computed once at load. */
  weightsSha256?: string;
  /** What runs, relative to the model's folder: the file transformers.js names for the dtype, or for int8-row the file it was written from and the rewrite (`onnx/model.onnx+int8-row-v2`). */
  weightsFile?: string;
  /** Why DTYPE=auto's int8-row is not what runs (the rewrite could not take the file): what runs instead, and why. */
  dtypeFallback?: string;
  /** How an embedding model makes its embedding, where its folder says (sentence-transformers' modules.json). */
  embedding?: EmbeddingHead;
  /** The worker process's resident memory at its last beat, in bytes. */
  rssBytes?: number;
  /** The most resident memory the worker process has held since it started, in bytes (Linux: VmHWM). */
  peakRssBytes?: number;
  /** WORKER_MEMORY_MB in bytes, where set: what the peak is kept under. */
  memoryBudgetBytes?: number;
  /** Padded tokens (rows × longest) of the largest model call the worker has run. */
  largestCallTokens?: number;
  /** What the worker has done since it started, for Triton's statistics (GET /v2/models/<id>/stats). */
  stats?: InferenceStats;
  /** BATCH_MAX_WAIT_MS: how long a worker waits to fill a batch, for Triton's model configuration. */
  batchMaxWaitMs?: number;
}

/** An embedding model's head, as its sentence-transformers folder describes it and the worker runs it. */
export interface EmbeddingHead {
  /** sentence-transformers' pooling modes, concatenated in this order (cls, max, mean, mean_sqrt_len_tokens, weightedmean, lasttoken). */
  pooling: string[];
  /** false: a prompt's tokens are left out of the pooling. */
  includePrompt: boolean;
  /** Dense modules after the pooling, run inside the ONNX graph (its sentence_embedding output). */
  dense: string[];
  /** A Normalize module ends the modules. */
  normalize: boolean;
  /** Named prompts (config_sentence_transformers.json). */
  prompts: Record<string, string>;
  /** The prompt put before an input that names none ('' for none). */
  defaultPrompt: string;
  /** Where a batch's shorter sequences are padded: the tokenizer's side. */
  paddingSide: 'left' | 'right';
}

/** A worker's download of its model's files, announced in its heartbeat while it loads. */
export interface ModelDownload {
  /** The file on its way now (the last one, once done). */
  file: string;
  /** Bytes received so far, over all the files this start downloads. */
  bytes: number;
  /** Bytes to download in all; 0 when the server does not say. */
  totalBytes: number;
  percent: number;
  /** The rate measured over the last few seconds. */
  bytesPerSecond: number;
  /** Epoch ms when the last file was complete; absent while downloading. */
  doneAt?: number;
}

/**
 * Only what a gateway must read of an announcement is checked strictly (kind, protocol, id, model,
 * state): an announcement of another protocol is still read, so that the gateway can say why it
 * sends that worker nothing.
 */
export const workerInfoSchema = z
  .object({
    kind: z.literal('worker'),
    protocol: z.number().int(),
    id: z.string(),
    model: z.string(),
    state: z.enum(['loading', 'ready', 'draining']),
  })
  .loose() as unknown as z.ZodType<WorkerInfo>;
