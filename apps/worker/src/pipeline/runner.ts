import { setTimeout as turnOfTheLoop } from 'node:timers/promises';
import {
  ApiError,
  type QueuedRequest,
  type RequestOutcome,
  type TaskInput,
  type TaskParameters,
} from '@tserve/contract';
import type { Engine, Encoded, BatchOutput } from '../model/engine.js';
import type { TaskHead, TaskHeads } from '../tasks/index.js';
import { planBatches, type PlanLimits, type Sequence } from './planner.js';
import { InferenceStatistics } from './stats.js';

/** Where the runner sends each request's outcome, once per request (transport/settling.ts gathers them by job). */
export interface OutcomeSink {
  record(request: QueuedRequest, outcome: RequestOutcome): void;
}

/** One model call, as the runner reports it to an observer (tracing). */
export interface ModelCall {
  /** The requests whose sequences it ran, each once. */
  requests: QueuedRequest[];
  sequences: number;
  /** Rows × the longest row: what the model computed over. */
  paddedTokens: number;
  /** The forward pass alone. */
  modelMs: number;
  /** The forward pass and the decoding of its rows. */
  callMs: number;
}

export interface ModelCallObserver {
  ran(call: ModelCall): void;
}

export interface BatchReport {
  /** Sequences in each model call that ran. */
  callSizes: number[];
  expired: number;
  /** Requests whose client had left: skipped unrun. */
  abandoned: number;
}

/** A batch tokenized and checked, ready for its model calls. */
export interface PreparedBatch {
  sequences: Sequence<Owner>[];
  report: BatchReport;
}

/** Which request, input and part of that input (a pair, a span) a sequence is. */
interface Owner {
  pending: Pending;
  input: number;
  part: number;
}

interface Pending {
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
  inferenceMs: number;
  batchSize: number;
  failed: boolean;
  /** Its phases, for the statistics: tokenizing, its share of model calls, and decoding. */
  inputMs: number;
  inferMs: number;
  outputMs: number;
  /** Sequences its inputs ran as: its tokenizing is shared among them in each call's statistics. */
  sequenceCount: number;
}

/** Where a model call's time went, over the calls that isolating a culprit may split it into. */
interface CallTiming {
  forwardMs: number;
  decodeMs: number;
}

type Result = { ok: true; value: unknown } | { ok: false; error: ApiError };

/** Longest stretch of tokenizing or post-processing before the thread lets its timers and I/O run. */
const SLICE_MS = 50;

/**
 * Gives the event loop a turn once SLICE_MS of synchronous work has run since the last. Tokenizing
 * and post-processing are synchronous and some inputs take long (a megabyte of text to tokenize;
 * hundreds of fill-mask candidates); a batch of them done in one go would starve
 * the heartbeat and the lock renewals, and gateways and BullMQ would count this worker dead and
 * send its work again.
 */
class LoopTurns {
  private since = performance.now();

  /** Whether any turn was given so far. */
  given = false;

  async take(): Promise<void> {
    if (performance.now() - this.since < SLICE_MS) return;
    // A timeout, not an immediate: an immediate's turn can come before the timers' phase.
    await turnOfTheLoop(0);
    this.since = performance.now();
    this.given = true;
  }
}

const firstLine = (message: string) =>
  message
    .split('\n')[0]
    .replace(/\/\S*onnxruntime_src\S*/g, '')
    .slice(0, 240);

/** An input's refusal, saying which input it was where the request has several. */
function namingInput(err: unknown, index: number, count: number): unknown {
  return err instanceof ApiError && count > 1 ? new ApiError(err.type, `inputs[${index}]: ${err.message}`) : err;
}

/** What a BatchRunner runs with; the optional parts have defaults for tests. */
export interface BatchRunnerParts {
  engine: Engine;
  heads: TaskHeads;
  /** `longest`: the longest sequence the memory budget takes (a longer one is refused 413); absent without a budget. */
  limits: PlanLimits & { longest?: number };
  outcomes: OutcomeSink;
  /** Requests whose clients have gone away (the cancellations the gateways publish). */
  abandoned?: { has(requestId: string): boolean };
  now?: () => number;
  /** MAX_ANSWER_VALUES: numbers one request's answer may hold (see TaskHead.answerValues). */
  maxAnswerValues?: number;
  stats?: InferenceStatistics;
  /** Told of each model call, where tracing is on. */
  calls?: ModelCallObserver;
}

/**
 * Runs one gathered batch of requests: drops expired and abandoned ones unrun, rejects bad inputs
 * alone, plans model calls by length and tokens, and isolates a failing input by splitting its call
 * until only the culprit fails. Each request's outcome goes to the sink as soon as its last input is done.
 */
export class BatchRunner {
  private readonly engine: Engine;
  private readonly heads: TaskHeads;
  private readonly limits: BatchRunnerParts['limits'];
  private readonly outcomes: OutcomeSink;
  private readonly abandoned: { has(requestId: string): boolean };
  private readonly now: () => number;
  private readonly maxAnswerValues: number;
  private readonly stats: InferenceStatistics;
  private readonly calls?: ModelCallObserver;

  constructor(parts: BatchRunnerParts) {
    this.engine = parts.engine;
    this.heads = parts.heads;
    this.limits = parts.limits;
    this.outcomes = parts.outcomes;
    this.abandoned = parts.abandoned ?? new Set();
    this.now = parts.now ?? Date.now;
    this.maxAnswerValues = parts.maxAnswerValues ?? Number.POSITIVE_INFINITY;
    this.stats = parts.stats ?? new InferenceStatistics();
    this.calls = parts.calls;
  }

  async run(requests: QueuedRequest[]): Promise<BatchReport> {
    return this.execute(await this.prepare(requests));
  }

  /**
   * Tokenizes and checks a batch on this thread; the consumer does it while the model thread still
   * runs the previous batch. Expired, abandoned and invalid requests are finished here, unrun.
   * The event loop gets its turns between inputs (LoopTurns).
   */
  async prepare(requests: QueuedRequest[]): Promise<PreparedBatch> {
    const batch: PreparedBatch = { sequences: [], report: { callSizes: [], expired: 0, abandoned: 0 } };
    const turns = new LoopTurns();
    for (const request of requests) {
      await turns.take();
      if (this.dropIfDead(request, batch.report)) continue;
      try {
        const pending: Pending = {
          request,
          head: this.heads(request.task),
          parameters: request.parameters,
          parts: [],
          remaining: 0,
          tokens: [],
          warnings: [],
          inferenceMs: 0,
          batchSize: 0,
          failed: false,
          inputMs: 0,
          inferMs: 0,
          outputMs: 0,
          sequenceCount: 0,
        };
        if (pending.head.answer) {
          const outputs: unknown[] = [];
          for (const [i, input] of request.inputs.entries()) {
            if (i > 0) await turns.take();
            const started = performance.now();
            try {
              outputs.push(pending.head.answer(input, request.parameters, this.engine));
            } catch (err) {
              throw namingInput(err, i, request.inputs.length);
            }
            pending.inputMs += performance.now() - started;
          }
          const queueMs = Math.max(0, this.now() - request.enqueuedAt);
          this.stats.succeeded(this.now(), queueMs, {
            queueMs,
            inputMs: pending.inputMs,
            inferMs: 0,
            outputMs: 0,
            inputs: request.inputs.length,
          });
          this.outcomes.record(request, {
            id: request.id,
            ok: true,
            outputs,
            warnings: [],
            timing: { queue_ms: queueMs, inference_ms: 0, batch_size: 0 },
          });
          continue;
        }
        const encoded: Encoded[][] = [];
        for (const [i, input] of request.inputs.entries()) {
          if (i > 0) await turns.take();
          const started = performance.now();
          encoded.push(this.prepareInput(input, i, request.inputs.length, pending));
          pending.inputMs += performance.now() - started;
        }
        this.checkAnswerSize(pending, encoded);
        pending.parts = encoded.map((sequences) => new Array<unknown>(sequences.length));
        pending.remaining = encoded.reduce((n, sequences) => n + sequences.length, 0);
        pending.sequenceCount = pending.remaining;
        pending.tokens = encoded.map((sequences) => sequences.reduce((m, e) => m + e.ids.length, 0));
        encoded.forEach((sequences, input) =>
          sequences.forEach((e, part) => batch.sequences.push({ owner: { pending, input, part }, encoded: e })),
        );
        // Nothing for the model to run (tokenization alone): answered now.
        if (pending.remaining === 0) await this.finishRequest(pending, turns);
      } catch (err) {
        this.fail(request, err instanceof ApiError ? err : new ApiError('validation', String(err)));
      }
    }
    return batch;
  }

  /** Runs a prepared batch's model calls, planned by length and tokens. */
  async execute(batch: PreparedBatch): Promise<BatchReport> {
    const { report } = batch;
    for (const chunk of planBatches(batch.sequences, this.limits)) {
      // A long call ahead of it may have used up a request's time, or its client may have left.
      const live = chunk.filter(({ owner }) => {
        if (owner.pending.failed) return false;
        if (!this.dropIfDead(owner.pending.request, report)) return true;
        owner.pending.failed = true;
        return false;
      });
      if (live.length === 0) continue;
      const started = performance.now();
      const startedAt = this.now();
      const timing: CallTiming = { forwardMs: 0, decodeMs: 0 };
      const results = await this.runIsolated(live, report, timing);
      const elapsed = performance.now() - started;
      this.calls?.ran({
        requests: [...new Set(live.map(({ owner }) => owner.pending.request))],
        sequences: live.length,
        paddedTokens: live.length * live.reduce((n, { encoded }) => Math.max(n, encoded.ids.length), 0),
        modelMs: timing.forwardMs,
        callMs: elapsed,
      });
      // A request with several inputs in this call spent the call's time once, not once per input.
      for (const pending of new Set(live.map(({ owner }) => owner.pending))) {
        pending.inferenceMs += elapsed;
        pending.inferMs += timing.forwardMs;
        pending.outputMs += timing.decodeMs;
        pending.batchSize = Math.max(pending.batchSize, live.length);
        pending.queueMs ??= Math.max(0, startedAt - pending.request.enqueuedAt);
      }
      const inputMs = live.reduce(
        (ms, { owner }) => ms + owner.pending.inputMs / Math.max(1, owner.pending.sequenceCount),
        0,
      );
      this.stats.executed(live.length, inputMs, timing.forwardMs, timing.decodeMs);
      const turns = new LoopTurns();
      for (const [i, { owner }] of live.entries()) await this.recordResult(owner, results[i], turns);
    }
    return report;
  }

  /** Fails every request of the batch still unanswered: for a batch that broke outside the runner's own isolation. */
  failUnanswered(batch: PreparedBatch, error: ApiError): void {
    for (const pending of new Set(batch.sequences.map(({ owner }) => owner.pending))) {
      if (pending.failed || pending.remaining === 0) continue;
      pending.failed = true;
      this.fail(pending.request, error);
    }
  }

  /**
   * Refuses, before the model runs, a request whose answer would be too large to build: a small
   * request for many inputs' token vectors can ask for millions of numbers, and building them held
   * its worker's main thread past its heartbeats and swelled its memory (bench/HISTORY.md).
   */
  private checkAnswerSize({ head, parameters }: Pending, encoded: Encoded[][]): void {
    if (!head.answerValues) return;
    const values = encoded.flat().reduce((n, e) => n + head.answerValues!(e, parameters), 0);
    if (values > this.maxAnswerValues) {
      throw new ApiError(
        'payload_too_large',
        `the answer would hold ${values} numbers; at most ${this.maxAnswerValues} are sent in one (MAX_ANSWER_VALUES): send fewer or shorter inputs${'pooling' in parameters && parameters.pooling === 'none' ? ', or pool each into one vector' : ''}`,
      );
    }
  }

  /** Finishes, unrun, a request past its deadline or whose client left; true if it did. */
  private dropIfDead(request: QueuedRequest, report: BatchReport): boolean {
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

  /** The sequences one input runs as, checked; a warning where one was cut to the model's length. */
  private prepareInput(input: TaskInput, index: number, count: number, pending: Pending): Encoded[] {
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
        // culprit (runIsolated) would cost every other input in it several calls: refused before any.
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

  private tooLong(encoded: Encoded): ApiError {
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

  /** Runs a call; if it fails, halves it until each failure is pinned on the input that caused it. */
  private async runIsolated(chunk: Sequence<Owner>[], report: BatchReport, timing: CallTiming): Promise<Result[]> {
    let output: BatchOutput;
    const started = performance.now();
    try {
      report.callSizes.push(chunk.length);
      output = await this.engine.forward(chunk.map((s) => s.encoded));
    } catch (err) {
      timing.forwardMs += performance.now() - started;
      if (chunk.length === 1) return [{ ok: false, error: this.culpritError(chunk[0].encoded, err) }];
      const middle = Math.ceil(chunk.length / 2);
      const left = await this.runIsolated(chunk.slice(0, middle), report, timing);
      const right = await this.runIsolated(chunk.slice(middle), report, timing);
      return [...left, ...right];
    }
    timing.forwardMs += performance.now() - started;
    const turns = new LoopTurns();
    const results: Result[] = [];
    for (const [row, { owner }] of chunk.entries()) {
      await turns.take();
      // Where the rows before it took long, they may have used up its time, or its client may
      // have left meanwhile: its result would go to nobody (recordResult passes over a failed
      // request's results).
      if (owner.pending.failed || (turns.given && this.dropIfDead(owner.pending.request, report))) {
        owner.pending.failed = true;
        results.push({ ok: false, error: new ApiError('cancelled', 'not post-processed') });
        continue;
      }
      const decoding = performance.now();
      try {
        results.push({
          ok: true,
          value: owner.pending.head.decode(output, row, chunk[row].encoded, owner.pending.parameters),
        });
      } catch (err) {
        results.push({
          ok: false,
          error: new ApiError('internal', `post-processing failed: ${firstLine(String(err))}`),
        });
      }
      timing.decodeMs += performance.now() - decoding;
    }
    return results;
  }

  private culpritError(encoded: Encoded, err: unknown): ApiError {
    if (encoded.ids.length > this.engine.loaded.maxLength) return this.tooLong(encoded);
    return new ApiError(
      'inference',
      `the model could not run this input: ${firstLine(err instanceof Error ? err.message : String(err))}`,
    );
  }

  /** One sequence's decoded row (or failure); the request is finished with its last sequence. */
  private async recordResult({ pending, input, part }: Owner, result: Result, turns: LoopTurns): Promise<void> {
    if (pending.failed) return;
    const many = pending.request.inputs.length > 1;
    const failWith = (error: ApiError) => {
      pending.failed = true;
      this.fail(pending.request, many ? new ApiError(error.type, `inputs[${input}]: ${error.message}`) : error);
    };
    if (!result.ok) return failWith(result.error);
    pending.parts[input][part] = result.value;
    if (--pending.remaining > 0) return;
    await this.finishRequest(pending, turns);
  }

  /** Every sequence of the request is decoded: each input's answer from its parts, with turns between inputs (LoopTurns). */
  private async finishRequest(pending: Pending, turns: LoopTurns): Promise<void> {
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
    this.outcomes.record(pending.request, {
      id: pending.request.id,
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
    const { queueMs = 0, inputMs, inferMs, outputMs } = pending;
    this.stats.succeeded(this.now(), Math.max(0, this.now() - request.enqueuedAt), {
      queueMs,
      inputMs,
      inferMs,
      outputMs,
      inputs: request.inputs.length,
    });
  }

  private fail(request: QueuedRequest, error: ApiError): void {
    this.outcomes.record(request, { id: request.id, ok: false, error: error.toBody() });
    this.stats.failed(Math.max(0, this.now() - request.enqueuedAt));
  }
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;
