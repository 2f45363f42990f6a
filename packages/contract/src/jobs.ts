import type { Task, TaskParameters } from './schemas.js';
import type { ErrorBody } from './errors.js';

/** What the gateway enqueues for one request: already validated, so the worker trusts it. */
export interface InferenceJobData {
  inputs: string[];
  parameters: TaskParameters;
  /** Epoch ms after which the job must not run: the client has been answered 504. */
  deadline: number;
  /** Pub/sub channel of the gateway instance waiting for this job. */
  replyTo: string;
  enqueuedAt: number;
}

export interface JobTiming {
  /** From enqueue to the start of the model call that ran it. */
  queue_ms: number;
  /** Model calls that ran this job's inputs, tokenization and post-processing included. */
  inference_ms: number;
  /** Sequences in the model call(s) that ran it; the largest if several. */
  batch_size: number;
}

export type JobOutcome =
  | { id: string; ok: true; outputs: unknown[]; warnings: string[]; timing: JobTiming }
  | { id: string; ok: false; error: ErrorBody };

/** What a worker announces in Redis; the gateway learns the served models from these alone. */
export interface WorkerInfo {
  id: string;
  model: string;
  task: Task;
  dtype: string;
  device: string;
  pid: number;
  host: string;
  startedAt: number;
  batchMaxSize: number;
  maxTokens: number;
}
