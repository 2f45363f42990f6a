import { ApiError, type TaskInput } from '@tserve/contract';
import type { Encoded, Engine } from '../model/engine.js';
import type { Pending, Sequence } from './prepared-batch.js';

/**
 * The model's sequences: a request's inputs made into them and checked (InputEncoder), and the
 * sequences of a batch planned into model calls (planBatches).
 */

export interface PlanLimits {
  maxSize: number;
  /** Padded tokens (longest × count) one model call may hold. */
  maxPaddedTokens: number;
  /** The most rows of `length` tokens one call may hold within the worker's memory budget (memory.ts). */
  maxRows?: (length: number) => number;
}

/**
 * Splits gathered sequences into model calls. Sequences are sorted by length so each call pads
 * to a near neighbour, and a call closes when it would exceed the size cap, the padded-token
 * cap, the rows its length may have under the memory budget, or pad more than half of its tokens
 * (one long input must not pad many short ones).
 * Shortest calls come first: they finish first, so short requests are answered first.
 */
export function planBatches<T>(sequences: Sequence<T>[], limits: PlanLimits): Sequence<T>[][] {
  const sorted = [...sequences].sort((a, b) => a.encoded.ids.length - b.encoded.ids.length);
  const chunks: Sequence<T>[][] = [];
  let current: Sequence<T>[] = [];
  let realTokens = 0;
  for (const seq of sorted) {
    const length = seq.encoded.ids.length;
    const padded = (current.length + 1) * length;
    const fits =
      current.length < limits.maxSize &&
      padded <= limits.maxPaddedTokens &&
      current.length < (limits.maxRows?.(length) ?? Number.POSITIVE_INFINITY) &&
      padded <= 2 * (realTokens + length);
    if (current.length > 0 && !fits) {
      chunks.push(current);
      current = [];
      realTokens = 0;
    }
    current.push(seq);
    realTokens += length;
  }
  if (current.length) chunks.push(current);
  return chunks;
}

/** An input's refusal, saying which input it was where the request has several. */
export function namingInput(err: unknown, index: number, count: number): unknown {
  return err instanceof ApiError && count > 1 ? new ApiError(err.type, `inputs[${index}]: ${err.message}`) : err;
}

/**
 * Turns a request's inputs into the sequences the model runs, and refuses, before any model call,
 * an input the call would surely fail or could not afford: longer than the model's position table,
 * longer than the memory budget takes, rejected by its head, or asking for too large an answer.
 */
export class InputEncoder {
  constructor(
    private readonly engine: Engine,
    /** `longest`: the longest sequence the memory budget takes, where there is one; a longer one is refused 413. */
    private readonly limits: { longest?: number },
    /** MAX_ANSWER_VALUES: numbers one request's answer may hold (see TaskHead.answerValues). */
    private readonly maxAnswerValues: number,
  ) {}

  /** The sequences one input runs as, checked; a warning where one was cut to the model's length. */
  encode(input: TaskInput, index: number, count: number, pending: Pending): Encoded[] {
    const { head, parameters } = pending;
    try {
      const sequences = head.encode
        ? head.encode(input, parameters, this.engine)
        : [
            this.engine.encode(
              input as string,
              ('truncation' in parameters ? parameters.truncation : undefined) ?? true,
            ),
          ];
      for (const encoded of sequences) {
        if (encoded.truncatedFrom !== undefined) {
          const { tokens, atLeast } = encoded.truncatedFrom;
          const warning = `${count > 1 ? `inputs[${index}]` : 'input'} was truncated from ${atLeast ? 'at least ' : ''}${tokens} to ${encoded.ids.length} tokens, the most this model accepts`;
          // The sequences of one input (a zero-shot input's, one per label) are cut alike: said once.
          if (!pending.warnings.includes(warning)) pending.warnings.push(warning);
        }
        // Past the model's position table its call surely fails, and halving that call to find the
        // culprit (BatchRunner's runIsolated) would cost every other input in it several calls:
        // refused before any.
        const { positions } = this.engine.loaded;
        if (positions !== undefined && encoded.ids.length > positions) throw this.tooLong(encoded);
        if (this.limits.longest !== undefined && encoded.ids.length > this.limits.longest)
          throw this.overBudget(encoded, this.limits.longest);
        head.check?.(encoded, parameters);
      }
      return sequences;
    } catch (err) {
      throw namingInput(err, index, count);
    }
  }

  /**
   * Refuses, before the model runs, a request whose answer would be too large to build: a small
   * request for many inputs' token vectors can ask for millions of numbers, and building them held
   * its worker's main thread past its heartbeats and swelled its memory (bench/HISTORY.md).
   */
  checkAnswerSize({ head, parameters }: Pending, encoded: Encoded[][]): void {
    if (!head.answerValues) return;
    const values = encoded.flat().reduce((n, e) => n + head.answerValues!(e, parameters), 0);
    if (values > this.maxAnswerValues) {
      throw new ApiError(
        'payload_too_large',
        `the answer would hold ${values} numbers; at most ${this.maxAnswerValues} are sent in one (MAX_ANSWER_VALUES): send fewer or shorter inputs${'pooling' in parameters && parameters.pooling === 'none' ? ', or pool each into one vector' : ''}`,
      );
    }
  }

  tooLong(encoded: Encoded): ApiError {
    return new ApiError(
      'validation',
      `input is ${encoded.readInPart ? 'at least ' : ''}${encoded.ids.length} tokens long but this model accepts at most ${this.engine.loaded.maxLength}; shorten it or leave "truncation" on`,
    );
  }

  /**
   * A sequence whose call would not fit the worker's memory budget even alone: run, it would take
   * the process past its container's limit, and the kernel would kill it with every request it holds.
   */
  private overBudget(encoded: Encoded, longest: number): ApiError {
    return new ApiError(
      'payload_too_large',
      `input is ${encoded.readInPart ? 'at least ' : ''}${encoded.ids.length} tokens long, but this worker's memory budget (WORKER_MEMORY_MB) holds model calls of at most ${longest} tokens per input; send a shorter input`,
    );
  }
}
