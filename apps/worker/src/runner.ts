import { ApiError, type InferenceJobData, type JobOutcome, type TaskParameters } from '@tserve/contract';
import type { Engine, Encoded, BatchOutput } from './engine.js';
import type { TaskHead } from './tasks/index.js';
import { planBatches, type PlanLimits, type Sequence } from './planner.js';

/** What the runner needs of a queued job; BullMQ's Job is adapted to this in consumer.ts. */
export interface RunnableJob {
  id: string;
  data: InferenceJobData;
}

/** Where finished jobs go: the consumer publishes each outcome and settles the job in the queue. */
export type Finish = (job: RunnableJob, outcome: JobOutcome) => Promise<void>;

export interface BatchReport {
  /** Sequences in each model call that ran. */
  callSizes: number[];
  /** Padded tokens (longest × count) of each model call. */
  callTokens: number[];
  expired: number;
  rejected: number;
}

interface Pending {
  job: RunnableJob;
  parameters: TaskParameters;
  outputs: unknown[];
  remaining: number;
  warnings: string[];
  /** From enqueue to its first model call; gateway and worker clocks must agree (NTP) for this across machines. */
  queueMs?: number;
  inferenceMs: number;
  batchSize: number;
  failed: boolean;
}

type Result = { ok: true; value: unknown } | { ok: false; error: ApiError };

const firstLine = (message: string) => message.split('\n')[0].replace(/\/\S*onnxruntime_src\S*/g, '').slice(0, 240);

/**
 * Runs one gathered batch of jobs: drops expired jobs unrun, rejects bad inputs alone, plans model
 * calls by length and tokens, and isolates a failing input by splitting its call until only the
 * culprit fails. Each job is finished as soon as its last input is done.
 */
export class BatchRunner {
  constructor(
    private readonly engine: Engine,
    private readonly head: TaskHead,
    private readonly limits: PlanLimits,
    private readonly finish: Finish,
    private readonly now: () => number = Date.now,
  ) {}

  async run(jobs: RunnableJob[]): Promise<BatchReport> {
    const report: BatchReport = { callSizes: [], callTokens: [], expired: 0, rejected: 0 };
    const sequences: Sequence<{ pending: Pending; input: number }>[] = [];

    for (const job of jobs) {
      if (job.data.deadline <= this.now()) {
        report.expired++;
        void this.fail(job, new ApiError('timeout', 'the request deadline passed before the model ran it'));
        continue;
      }
      const pending: Pending = {
        job,
        parameters: job.data.parameters,
        outputs: new Array(job.data.inputs.length),
        remaining: job.data.inputs.length,
        warnings: [],
        inferenceMs: 0,
        batchSize: 0,
        failed: false,
      };
      try {
        const encoded = job.data.inputs.map((text, i) => this.prepare(text, i, job.data.inputs.length, pending));
        encoded.forEach((e, input) => sequences.push({ owner: { pending, input }, encoded: e }));
      } catch (err) {
        report.rejected++;
        void this.fail(job, err instanceof ApiError ? err : new ApiError('validation', String(err)));
      }
    }

    for (const chunk of planBatches(sequences, this.limits)) {
      // A long batch ahead of it may have used up a job's time.
      const live = chunk.filter(({ owner }) => {
        if (owner.pending.failed) return false;
        if (owner.pending.job.data.deadline > this.now()) return true;
        owner.pending.failed = true;
        report.expired++;
        void this.fail(owner.pending.job, new ApiError('timeout', 'the request deadline passed before the model ran it'));
        return false;
      });
      if (live.length === 0) continue;
      const started = performance.now();
      const startedAt = this.now();
      const results = await this.runIsolated(live, report);
      const elapsed = performance.now() - started;
      // A job with several inputs in this call spent the call's time once, not once per input.
      for (const pending of new Set(live.map(({ owner }) => owner.pending))) {
        pending.inferenceMs += elapsed;
        pending.batchSize = Math.max(pending.batchSize, live.length);
        pending.queueMs ??= Math.max(0, startedAt - pending.job.data.enqueuedAt);
      }
      live.forEach(({ owner }, i) => this.settle(owner.pending, owner.input, results[i]));
    }
    return report;
  }

  private prepare(text: string, index: number, count: number, pending: Pending): Encoded {
    const truncation = pending.parameters.truncation ?? true;
    try {
      const encoded = this.engine.encode(text, truncation);
      if (encoded.truncatedFrom !== undefined) {
        pending.warnings.push(
          `${count > 1 ? `inputs[${index}]` : 'input'} was truncated from ${encoded.truncatedFrom} to ${encoded.ids.length} tokens, the most this model accepts`,
        );
      }
      this.head.check?.(encoded, pending.parameters);
      return encoded;
    } catch (err) {
      if (err instanceof ApiError && count > 1) throw new ApiError(err.type, `inputs[${index}]: ${err.message}`);
      throw err;
    }
  }

  /** Runs a call; if it fails, halves it until each failure is pinned on the input that caused it. */
  private async runIsolated(chunk: Sequence<{ pending: Pending; input: number }>[], report: BatchReport): Promise<Result[]> {
    let output: BatchOutput;
    try {
      report.callSizes.push(chunk.length);
      report.callTokens.push(chunk.length * Math.max(...chunk.map((s) => s.encoded.ids.length)));
      output = await this.engine.forward(chunk.map((s) => s.encoded));
    } catch (err) {
      if (chunk.length === 1) return [{ ok: false, error: this.culpritError(chunk[0].encoded, err) }];
      const middle = Math.ceil(chunk.length / 2);
      const left = await this.runIsolated(chunk.slice(0, middle), report);
      const right = await this.runIsolated(chunk.slice(middle), report);
      return [...left, ...right];
    }
    return chunk.map((seq, row): Result => {
      try {
        return { ok: true, value: this.head.decode(output, row, seq.encoded, seq.owner.pending.parameters) };
      } catch (err) {
        return { ok: false, error: new ApiError('internal', `post-processing failed: ${firstLine(String(err))}`) };
      }
    });
  }

  private culpritError(encoded: Encoded, err: unknown): ApiError {
    const limit = this.engine.loaded.maxLength;
    if (encoded.ids.length > limit) {
      return new ApiError(
        'validation',
        `input is ${encoded.ids.length} tokens long but this model accepts at most ${limit}; shorten it or leave "truncation" on`,
      );
    }
    return new ApiError('inference', `the model could not run this input: ${firstLine(err instanceof Error ? err.message : String(err))}`);
  }

  private settle(pending: Pending, input: number, result: Result): void {
    if (pending.failed) return;
    if (!result.ok) {
      pending.failed = true;
      const many = pending.job.data.inputs.length > 1;
      const error = many ? new ApiError(result.error.type, `inputs[${input}]: ${result.error.message}`) : result.error;
      void this.fail(pending.job, error);
      return;
    }
    pending.outputs[input] = result.value;
    if (--pending.remaining > 0) return;
    void this.finish(pending.job, {
      id: pending.job.id,
      ok: true,
      outputs: pending.outputs,
      warnings: pending.warnings,
      timing: { queue_ms: pending.queueMs ?? 0, inference_ms: round(pending.inferenceMs), batch_size: pending.batchSize },
    });
  }

  private fail(job: RunnableJob, error: ApiError): Promise<void> {
    return this.finish(job, { id: job.id, ok: false, error: error.toBody() });
  }
}

const round = (ms: number) => Math.round(ms * 1000) / 1000;
