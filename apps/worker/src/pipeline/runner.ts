import { ApiError, type QueuedRequest } from '@tserve/contract';
import type { Engine, Encoded, BatchOutput } from '../model/engine.js';
import type { TaskHeads } from '../tasks/index.js';
import { LoopTurns } from './loop-turns.js';
import { firstLine, InputEncoder, RequestOutcomes } from './requests.js';
import type { OutcomeSink } from './jobs.js';
import {
  pendingRequest,
  type BatchReport,
  type ModelCallObserver,
  type Owner,
  type PreparedBatch,
  type Sequence,
} from './prepared-batch.js';
import type { CallPacing } from './precedence.js';
import { InferenceStatistics } from './stats.js';

/**
 * Where a model call's time went, over the calls that isolating a culprit may split it into: the
 * model's own (its forward passes) and its rows' decoding.
 */
interface CallTiming {
  modelMs: number;
  outputMs: number;
}

type Result = { ok: true; value: unknown } | { ok: false; error: ApiError };

/** What a ModelBatchRunner runs with; the optional parts have defaults for tests. */
export interface ModelBatchRunnerParts {
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
export class ModelBatchRunner {
  private readonly outcomes: RequestOutcomes;
  private readonly encoder: InputEncoder;
  private readonly now: () => number;
  private readonly stats: InferenceStatistics;

  constructor(private readonly parts: ModelBatchRunnerParts) {
    this.now = parts.now ?? Date.now;
    this.stats = parts.stats ?? new InferenceStatistics();
    this.outcomes = new RequestOutcomes(parts.outcomes, this.stats, parts.abandoned ?? new Set(), this.now);
    this.encoder = new InputEncoder(parts.engine, parts.limits, parts.maxAnswerValues ?? Number.POSITIVE_INFINITY);
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
      if (this.outcomes.dropIfDead(request, batch.report)) continue;
      try {
        const pending = pendingRequest(request, this.parts.heads(request.task));
        if (pending.head.answer) {
          this.outcomes.answered(request, await this.encoder.answer(pending, turns), pending.inputMs);
          continue;
        }
        for (const sequence of await this.encoder.sequences(pending, turns)) batch.sequences.push(sequence);
        // Nothing for the model to run (tokenization alone): answered now.
        if (pending.remaining === 0) await this.outcomes.finish(pending, turns);
      } catch (err) {
        this.outcomes.fail(request, err instanceof ApiError ? err : new ApiError('validation', String(err)));
      }
    }
    return batch;
  }

  /**
   * Runs a prepared batch's model calls, planned by length and tokens. With `pacing`, each call holds
   * at most the rows it allows, and what must go ahead of the rest runs between two calls.
   */
  async execute(batch: PreparedBatch, pacing?: CallPacing): Promise<BatchReport> {
    let first = true;
    for (const planned of planCalls(batch.sequences, this.parts.limits)) {
      for (let at = 0; at < planned.length;) {
        if (!first) await pacing?.between();
        first = false;
        const rows = Math.max(1, pacing?.rows() ?? planned.length);
        await this.call(planned.slice(at, at + rows), batch.report, pacing);
        at += rows;
      }
    }
    return batch.report;
  }

  /** One model call of a batch: its live sequences run, isolated, and recorded. */
  private async call(chunk: Sequence<Owner>[], report: BatchReport, pacing?: CallPacing): Promise<void> {
    // A long call ahead of it may have used up a request's time, or its client may have left.
    const live = chunk.filter(({ owner }) => {
      if (owner.pending.failed) return false;
      if (!this.outcomes.dropIfDead(owner.pending.request, report)) return true;
      owner.pending.failed = true;
      return false;
    });
    if (live.length === 0) return;
    const started = performance.now();
    const startedAt = this.now();
    const timing: CallTiming = { modelMs: 0, outputMs: 0 };
    const results = await this.runIsolated(live, report, timing);
    const elapsed = performance.now() - started;
    pacing?.ran(live.length, elapsed);
    this.parts.calls?.ran({
      requests: [...new Set(live.map(({ owner }) => owner.pending.request))],
      sequences: live.length,
      paddedTokens: live.length * live.reduce((n, { encoded }) => Math.max(n, encoded.ids.length), 0),
      modelMs: timing.modelMs,
      inferenceMs: elapsed,
    });
    // A request with several inputs in this call spent the call's time once, not once per input.
    for (const pending of new Set(live.map(({ owner }) => owner.pending))) {
      pending.inferenceMs += elapsed;
      pending.modelMs += timing.modelMs;
      pending.outputMs += timing.outputMs;
      pending.batchSize = Math.max(pending.batchSize, live.length);
      pending.queueMs ??= Math.max(0, startedAt - pending.request.enqueuedAt);
    }
    const inputMs = live.reduce(
      (ms, { owner }) => ms + owner.pending.inputMs / Math.max(1, owner.pending.sequenceCount),
      0,
    );
    this.stats.executed(live.length, inputMs, timing.modelMs, timing.outputMs);
    const turns = new LoopTurns();
    for (const [i, { owner }] of live.entries()) await this.recordResult(owner, results[i], turns);
  }

  /** Fails every request of the batch still unanswered: for a batch that broke outside the runner's own isolation. */
  failUnanswered(batch: PreparedBatch, error: ApiError): void {
    for (const pending of new Set(batch.sequences.map(({ owner }) => owner.pending))) {
      if (pending.failed || pending.remaining === 0) continue;
      pending.failed = true;
      this.outcomes.fail(pending.request, error);
    }
  }

  /** Runs a call; if it fails, halves it until each failure is pinned on the input that caused it. */
  private async runIsolated(chunk: Sequence<Owner>[], report: BatchReport, timing: CallTiming): Promise<Result[]> {
    let output: BatchOutput;
    const started = performance.now();
    try {
      report.callSizes.push(chunk.length);
      output = await this.parts.engine.forward(chunk.map((s) => s.encoded));
    } catch (err) {
      timing.modelMs += performance.now() - started;
      if (chunk.length === 1) return [{ ok: false, error: this.culpritError(chunk[0].encoded, err) }];
      const middle = Math.ceil(chunk.length / 2);
      const left = await this.runIsolated(chunk.slice(0, middle), report, timing);
      const right = await this.runIsolated(chunk.slice(middle), report, timing);
      return [...left, ...right];
    }
    timing.modelMs += performance.now() - started;
    const turns = new LoopTurns();
    const results: Result[] = [];
    for (const [row, { owner }] of chunk.entries()) {
      await turns.take();
      // Where the rows before it took long, they may have used up its time, or its client may
      // have left meanwhile: its result would go to nobody (recordResult passes over a failed
      // request's results).
      if (owner.pending.failed || (turns.given && this.outcomes.dropIfDead(owner.pending.request, report))) {
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
      timing.outputMs += performance.now() - decoding;
    }
    return results;
  }

  private culpritError(encoded: Encoded, err: unknown): ApiError {
    if (encoded.ids.length > this.parts.engine.loaded.maxLength) return this.encoder.tooLong(encoded);
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
      this.outcomes.fail(
        pending.request,
        many ? new ApiError(error.type, `inputs[${input}]: ${error.message}`) : error,
      );
    };
    if (!result.ok) return failWith(result.error);
    pending.parts[input][part] = result.value;
    if (--pending.remaining > 0) return;
    await this.outcomes.finish(pending, turns);
  }
}

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
export function planCalls<T>(sequences: Sequence<T>[], limits: PlanLimits): Sequence<T>[][] {
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
