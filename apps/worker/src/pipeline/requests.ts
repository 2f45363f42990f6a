import { ApiError, type QueuedRequest, type TaskInput } from '@tserve/contract';
import type { Encoded, Engine } from '../model/engine.js';
import type { LoopTurns } from './loop-turns.js';
import type { BatchReport, Owner, Pending, Sequence } from './prepared-batch.js';
import type { InferenceStatistics } from './stats.js';
import type { OutcomeSink } from './jobs.js';

/**
 * A request's own steps in the worker, around the model calls its batch makes (runner.ts): its
 * inputs made into checked sequences (InputEncoder), and its outcome (RequestOutcomes).
 */

/** An error's first line, without the paths of ONNX Runtime's sources: what a client is told of a failure. */
export const firstLine = (message: string) =>
  message
    .split('\n')[0]
    .replace(/\/\S*onnxruntime_src\S*/g, '')
    .slice(0, 240);

/** An input's refusal, saying which input it was where the request has several. */
function namingInput(err: unknown, index: number, count: number): unknown {
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

  /**
   * A request's sequences, each input's encoded and checked with turns between inputs; the request
   * records how many there are and their tokens. Empty where the model has nothing to run.
   */
  async sequences(pending: Pending, turns: LoopTurns): Promise<Sequence<Owner>[]> {
    const { request } = pending;
    const encoded: Encoded[][] = [];
    for (const [i, input] of request.inputs.entries()) {
      if (i > 0) await turns.take();
      const started = performance.now();
      encoded.push(this.encode(input, i, request.inputs.length, pending));
      pending.inputMs += performance.now() - started;
    }
    this.checkAnswerSize(pending, encoded);
    pending.parts = encoded.map((sequences) => new Array<unknown>(sequences.length));
    pending.remaining = encoded.reduce((n, sequences) => n + sequences.length, 0);
    pending.sequenceCount = pending.remaining;
    pending.tokens = encoded.map((sequences) => sequences.reduce((m, e) => m + e.ids.length, 0));
    return encoded.flatMap((sequences, input) =>
      sequences.map((e, part) => ({ owner: { pending, input, part }, encoded: e })),
    );
  }

  /** For work that needs no model call (tokenization): each input's answer now, with turns between inputs. */
  async answer(pending: Pending, turns: LoopTurns): Promise<unknown[]> {
    const { request, head } = pending;
    const outputs: unknown[] = [];
    for (const [i, input] of request.inputs.entries()) {
      if (i > 0) await turns.take();
      const started = performance.now();
      try {
        outputs.push(head.answer!(input, request.parameters, this.engine));
      } catch (err) {
        throw namingInput(err, i, request.inputs.length);
      }
      pending.inputMs += performance.now() - started;
    }
    return outputs;
  }

  /** The sequences one input runs as, checked; a warning where one was cut to the model's length. */
  private encode(input: TaskInput, index: number, count: number, pending: Pending): Encoded[] {
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
        // culprit (ModelBatchRunner's runIsolated) would cost every other input in it several calls:
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
  private checkAnswerSize({ head, parameters, request }: Pending, encoded: Encoded[][]): void {
    if (!head.answerValues) return;
    const values = encoded.flat().reduce((n, e) => n + head.answerValues!(e, parameters), 0);
    // A piece of a larger request (request.pieces) holds its share: the whole answer, at most the bound.
    const pieces = request.pieces ?? 1;
    const most = Math.floor(this.maxAnswerValues / pieces);
    if (values > most) {
      const what =
        pieces > 1
          ? `one of its ${pieces} pieces would hold ${values} numbers, more than its share (${most}) of the ${this.maxAnswerValues} one answer may hold`
          : `the answer would hold ${values} numbers; at most ${this.maxAnswerValues} are sent in one`;
      const pool = 'pooling' in parameters && parameters.pooling === 'none' ? ', or pool each into one vector' : '';
      throw new ApiError('payload_too_large', `${what} (MAX_ANSWER_VALUES): send fewer or shorter inputs${pool}`);
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

/**
 * Each request's outcome, sent to the sink and counted in the statistics: its answer, its failure,
 * or its finish unrun where its deadline passed or its client left.
 */
export class RequestOutcomes {
  constructor(
    private readonly sink: OutcomeSink,
    private readonly stats: InferenceStatistics,
    /** Requests whose clients have gone away (the cancellations the gateways publish). */
    private readonly abandoned: { has(requestId: string): boolean },
    private readonly now: () => number,
  ) {}

  /** Finishes, unrun, a request past its deadline or whose client left; true if it did. */
  dropIfDead(request: QueuedRequest, report: BatchReport): boolean {
    if (request.deadline <= this.now()) {
      report.expired++;
      this.fail(request, new ApiError('timeout', 'the request deadline passed before the model ran it'));
      return true;
    }
    if (this.abandoned.has(request.id)) {
      report.abandoned++;
      this.fail(
        request,
        new ApiError('cancelled', 'the client closed the connection before the model ran the request'),
      );
      return true;
    }
    return false;
  }

  /** The answer of a request that needed no model call: its inputs' time is all it cost. */
  answered(request: QueuedRequest, outputs: unknown[], inputMs: number): void {
    const queueMs = Math.max(0, this.now() - request.enqueuedAt);
    this.stats.succeeded(this.now(), queueMs, {
      queueMs,
      inputMs,
      modelMs: 0,
      outputMs: 0,
      inputs: request.inputs.length,
    });
    this.sink.accept(request, {
      id: request.id,
      ok: true,
      outputs,
      warnings: [],
      timing: { queue_ms: queueMs, inference_ms: 0, batch_size: 0 },
    });
  }

  /** The answer of a request whose every sequence ran: `outputs`, one per input. */
  private succeeded(pending: Pending, outputs: unknown[]): void {
    const { request } = pending;
    this.sink.accept(request, {
      id: request.id,
      ok: true,
      outputs,
      warnings: pending.warnings,
      timing: {
        queue_ms: pending.queueMs ?? 0,
        inference_ms: round(pending.inferenceMs),
        batch_size: pending.batchSize,
      },
      tokens: pending.tokens,
    });
    const { queueMs = 0, inputMs, modelMs, outputMs } = pending;
    this.stats.succeeded(this.now(), Math.max(0, this.now() - request.enqueuedAt), {
      queueMs,
      inputMs,
      modelMs,
      outputMs,
      inputs: request.inputs.length,
    });
  }

  /** Every sequence of the request is decoded: each input's answer from its parts, with turns between inputs (LoopTurns). */
  async finish(pending: Pending, turns: LoopTurns): Promise<void> {
    const { head, request, parameters } = pending;
    const outputs: unknown[] = [];
    try {
      for (const [i, parts] of pending.parts.entries()) {
        if (i > 0) await turns.take();
        const started = performance.now();
        outputs.push(head.combine ? head.combine(parts, request.inputs[i], parameters) : parts[0]);
        pending.outputMs += performance.now() - started;
      }
    } catch (err) {
      const error =
        err instanceof ApiError ? err : new ApiError('internal', `post-processing failed: ${firstLine(String(err))}`);
      pending.failed = true;
      this.fail(request, error);
      return;
    }
    this.succeeded(pending, outputs);
  }

  fail(request: QueuedRequest, error: ApiError): void {
    this.sink.accept(request, { id: request.id, ok: false, error: error.toBody() });
    this.stats.failed(Math.max(0, this.now() - request.enqueuedAt));
  }
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;
