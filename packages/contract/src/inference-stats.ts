/**
 * What a worker counts of its work, in the terms of Triton's statistics extension: announced in its
 * heartbeat (WorkerInfo's `stats`), and summed over a model's workers for GET /v2/models/<id>/stats.
 */

/** A count and the nanoseconds it took in all, as Triton's statistics give them. */
export interface Duration {
  count: number;
  ns: number;
}

/** A worker's counts since it started, in the terms of Triton's statistics extension. */
export interface InferenceStats {
  /** Requests answered, and their time from enqueue to answer. */
  success: Duration;
  /** Requests failed or refused, and their time from enqueue to failure. */
  fail: Duration;
  /** Answered requests' wait from enqueue to their first model call. */
  queue: Duration;
  /** Their tokenization. */
  computeInput: Duration;
  /** Their model calls. */
  computeInfer: Duration;
  /** Their post-processing. */
  computeOutput: Duration;
  /** Inputs answered (a request of three texts counts three). */
  inferenceCount: number;
  /** Model calls. */
  executionCount: number;
  /** Epoch ms of the last answer; 0 before any. */
  lastInference: number;
  /** Model calls by their number of sequences. */
  batches: Record<string, { computeInput: Duration; computeInfer: Duration; computeOutput: Duration }>;
}

export const noDuration = (): Duration => ({ count: 0, ns: 0 });

/** Statistics with nothing counted: a worker's at start, and the sum of none. */
export function emptyInferenceStats(): InferenceStats {
  return {
    success: noDuration(),
    fail: noDuration(),
    queue: noDuration(),
    computeInput: noDuration(),
    computeInfer: noDuration(),
    computeOutput: noDuration(),
    inferenceCount: 0,
    executionCount: 0,
    lastInference: 0,
    batches: {},
  };
}
