import fs from 'node:fs';
import type { Dtype } from './device.js';

/**
 * What a CPU worker's memory is made of, and the largest model call a memory budget (WORKER_MEMORY_MB)
 * leaves room for. A worker holds its runtime (Node, the worker's code, a tokenizer in each thread),
 * the model's weights (ONNX Runtime keeps a packed copy beside the file's), and the tensors of the
 * model call it runs. Those grow with the call's padded tokens (rows × longest: each layer's hidden
 * and feed-forward tensors) and, for attention, with rows × heads × longest² (its scores and their
 * softmax): at the model's full length the second is most of it. ONNX Runtime's CPU arena keeps the
 * largest call's memory once it ran (and some more, ARENA_SLACK), so a worker's peak is its largest
 * call's; capping the call caps the peak. The constants were fitted on peak RSS (VmHWM) measured call
 * by call, and under load (docs/memory.md).
 */

/** The sizes of a transformer encoder that its memory depends on, read from its config.json. */
export interface ModelShape {
  hidden: number;
  heads: number;
  layers: number;
  /** Width of the feed-forward layer. */
  intermediate: number;
  vocab: number;
  positions: number;
}

/** Bytes a call holds per padded token and unit of hidden size (a layer's hidden and feed-forward tensors, alive together). */
const BYTES_PER_TOKEN_HIDDEN = 32;
/** Bytes a call holds per attention score (rows × heads × longest²): the scores, their mask and softmax, in fp32. */
const BYTES_PER_ATTENTION_SCORE = 20;
/**
 * What ONNX Runtime's CPU arena holds for calls up to a given size, over what one such call takes:
 * calls of other shapes before it leave pieces the arena keeps but cannot always fit the next call's
 * tensors into. Set above what was measured under load (docs/memory.md).
 */
const ARENA_SLACK = 1.3;
/** A worker process before its model: Node, its code and a tokenizer in each of its two threads. */
export const RUNTIME_BYTES = 180 * 2 ** 20;
/** ONNX Runtime holds a model's weights about twice: as loaded, and packed for its kernels. */
const WEIGHT_COPIES = 2;
/**
 * Room kept beside the model call for the worker's own work while it runs: requests, their texts
 * and tokens, answers on their way out, and the garbage collector's slack.
 */
export const HEADROOM_BYTES = 64 * 2 ** 20;

const BYTES_PER_WEIGHT: Record<Dtype, number> = {
  'int8-row': 1,
  fp32: 4,
  fp16: 2,
  q8: 1,
  int8: 1,
  uint8: 1,
  q4: 0.5,
  q4f16: 0.5,
  bnb4: 0.5,
};

const MiB = 2 ** 20;

/** The shape from a config.json: BERT's names, or DistilBERT's; undefined where it says too little to reckon with. */
export function modelShape(config: Record<string, unknown>): ModelShape | undefined {
  const read = (...names: string[]) =>
    names.map((n) => config[n]).find((v): v is number => typeof v === 'number' && v > 0);
  const hidden = read('hidden_size', 'dim', 'd_model');
  const heads = read('num_attention_heads', 'n_heads', 'encoder_attention_heads');
  const layers = read('num_hidden_layers', 'n_layers', 'encoder_layers');
  if (hidden === undefined || heads === undefined || layers === undefined) return undefined;
  return {
    hidden,
    heads,
    layers,
    intermediate: read('intermediate_size', 'hidden_dim', 'encoder_ffn_dim') ?? 4 * hidden,
    vocab: read('vocab_size') ?? 0,
    positions: read('max_position_embeddings') ?? 512,
  };
}

/** Parameters of the encoder: embeddings, then per layer attention (4 × hidden²) and feed-forward (2 × hidden × intermediate). */
export function parameterCount(shape: ModelShape): number {
  const { hidden, layers, intermediate, vocab, positions } = shape;
  return (
    (vocab + positions + 2) * hidden +
    layers * (4 * hidden * hidden + 2 * hidden * intermediate + 9 * hidden + intermediate)
  );
}

/** What the worker holds before any call: runtime and weights. */
export function restingBytes(shape: ModelShape, dtype: Dtype): number {
  return RUNTIME_BYTES + WEIGHT_COPIES * parameterCount(shape) * BYTES_PER_WEIGHT[dtype];
}

/** Bytes one model call of `rows` sequences padded to `length` tokens holds at its peak. */
export function callBytes(shape: ModelShape, rows: number, length: number): number {
  return rows * length * (shape.hidden * BYTES_PER_TOKEN_HIDDEN + shape.heads * length * BYTES_PER_ATTENTION_SCORE);
}

/** Bytes the arena comes to hold for calls up to that size, among calls of other sizes. */
export function heldBytes(shape: ModelShape, rows: number, length: number): number {
  return ARENA_SLACK * callBytes(shape, rows, length);
}

/** The batch limits a worker runs with: its settings, lowered where its memory budget asks. */
export interface MemoryLimits {
  maxSize: number;
  maxPaddedTokens: number;
  /** The most rows of `length` tokens one call may hold; absent without a budget. */
  maxRows?: (length: number) => number;
  /** The longest sequence a call may hold at all; a longer input is refused (413). Absent without a budget. */
  longest?: number;
  /** Bytes the arena may hold for calls (heldBytes): the budget less the worker at rest and its headroom. */
  callBudgetBytes?: number;
}

export interface BudgetInput {
  budgetBytes: number;
  /** What the worker holds at rest: the estimate, or what it measured, whichever is more. */
  restingBytes: number;
  shape: ModelShape;
  maxSize: number;
  maxPaddedTokens: number;
  /** The longest sequence the model takes (its position table, or the tokenizer's limit). */
  maxLength: number;
  /** The model's position table, where its config states one: no call is longer. */
  positions?: number;
}

export class MemoryBudgetError extends Error {}

/**
 * The limits under which every model call fits the budget beside the worker at rest: for each length,
 * the rows that fit; the padded tokens and rows any call can then reach; and the longest sequence
 * that fits alone. Fails where not even a one-token call fits.
 */
export function limitsWithin(input: BudgetInput): Required<MemoryLimits> {
  const { budgetBytes, restingBytes, shape, maxSize, maxPaddedTokens, maxLength, positions } = input;
  const callBudgetBytes = budgetBytes - restingBytes - HEADROOM_BYTES;
  const fits = (rows: number, length: number) => heldBytes(shape, rows, length) <= callBudgetBytes;
  if (!fits(1, 1)) {
    throw new MemoryBudgetError(
      `WORKER_MEMORY_MB=${Math.round(budgetBytes / MiB)} leaves no room for a model call: the worker holds about ${Math.ceil(restingBytes / MiB)} MiB at rest, and keeps ${HEADROOM_BYTES / MiB} MiB for its own work beside the call; give it at least ${Math.ceil((restingBytes + HEADROOM_BYTES + heldBytes(shape, 1, maxLength)) / MiB)} to take inputs of ${maxLength} tokens`,
    );
  }
  // The longest a call may be is what fits alone: the budget bounds memory, not length. The
  // tokenizer's limit is no bound (with truncation off, what the model makes of a longer input is its
  // own answer); only a stated position table is.
  let longest = 1;
  while (longest < (positions ?? Number.POSITIVE_INFINITY) && fits(1, longest + 1)) longest++;
  // rows × length × (a + b × length) is linear in rows: the most that fit are a division away.
  const rowsAt = (length: number) =>
    Math.max(
      0,
      Math.min(
        maxSize,
        Math.floor(maxPaddedTokens / length),
        Math.floor(callBudgetBytes / heldBytes(shape, 1, length)),
      ),
    );
  let tokens = 0;
  let rows = 0;
  for (let length = 1; length <= longest; length++) {
    tokens = Math.max(tokens, rowsAt(length) * length);
    rows = Math.max(rows, rowsAt(length));
  }
  return {
    maxSize: Math.max(1, rows),
    // A sequence longer than BATCH_MAX_TOKENS still runs, alone, as without a budget.
    maxPaddedTokens: Math.min(maxPaddedTokens, Math.max(longest, tokens)),
    maxRows: (length) => Math.max(1, rowsAt(length)),
    longest,
    callBudgetBytes,
  };
}

/** The worker's resident memory now and at its peak (VmHWM, where Linux reports it), in bytes. */
export function residentMemory(): { rssBytes: number; peakRssBytes?: number } {
  const rssBytes = process.memoryUsage.rss();
  try {
    const match = /^VmHWM:\s+(\d+)\s+kB/m.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    return match ? { rssBytes, peakRssBytes: Number(match[1]) * 1024 } : { rssBytes };
  } catch {
    return { rssBytes };
  }
}
