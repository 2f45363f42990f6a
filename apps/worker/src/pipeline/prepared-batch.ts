import type { QueuedRequest, TaskParameters } from '@tserve/contract';
import type { TaskHead } from '../tasks/index.js';
import type { Encoded } from '../model/engine.js';

/** One input of one request (or one part of it: a pair, a span), as the model runs it. */
export interface Sequence<T = unknown> {
  owner: T;
  encoded: Encoded;
}

export interface BatchReport {
  /** Sequences in each model call that ran. */
  callSizes: number[];
  expired: number;
  /** Requests whose client had left: skipped unrun. */
  abandoned: number;
}

/** One model call, as the runner reports it to an observer (tracing). */
export interface ModelCall {
  /** The requests whose sequences it ran, each once. */
  requests: QueuedRequest[];
  sequences: number;
  /** Rows × the longest row: what the model computed over. */
  paddedTokens: number;
  /** The model's own time: the forward pass alone. */
  modelMs: number;
  /** The call's time: the forward pass and the decoding of its rows (a request's `inference_ms`). */
  inferenceMs: number;
}

export interface ModelCallObserver {
  ran(call: ModelCall): void;
}

/** A batch tokenized and checked, ready for its model calls. */
export interface PreparedBatch {
  sequences: Sequence<Owner>[];
  report: BatchReport;
}

/** Which request, input and part of that input (a pair, a span) a sequence is. */
export interface Owner {
  pending: Pending;
  input: number;
  part: number;
}

/** A request of the batch until its outcome: its sequences' decoded parts, and what it has cost. */
export interface Pending {
  request: QueuedRequest;
  head: TaskHead;
  parameters: TaskParameters;
  /** Each input's decoded sequences, in the order its head encoded them. */
  parts: unknown[][];
  /** Sequences not yet decoded. */
  remaining: number;
  /** Tokens of each input's sequences. */
  tokens: number[];
  warnings: string[];
  /** From enqueue to its first model call; gateway and worker clocks must agree (NTP) for this across machines. */
  queueMs?: number;
  /** Its model calls' time (ModelCall.inferenceMs), once each: its `inference_ms`, `x-inference-time`. */
  inferenceMs: number;
  batchSize: number;
  failed: boolean;
  /** Its phases, for the statistics: tokenizing, the model's own time in its calls, and decoding. */
  inputMs: number;
  modelMs: number;
  outputMs: number;
  /** Sequences its inputs ran as: its tokenizing is shared among them in each call's statistics. */
  sequenceCount: number;
}

/** A request as it enters the batch: nothing encoded, decoded or spent yet. */
export function pendingRequest(request: QueuedRequest, head: TaskHead): Pending {
  return {
    request,
    head,
    parameters: request.parameters,
    parts: [],
    remaining: 0,
    tokens: [],
    warnings: [],
    inferenceMs: 0,
    batchSize: 0,
    failed: false,
    inputMs: 0,
    modelMs: 0,
    outputMs: 0,
    sequenceCount: 0,
  };
}
