import { randomUUID } from 'node:crypto';
import {
  ApiError,
  describeIssues,
  parameterSchemas,
  type InferenceJobData,
  type JobTiming,
  type TaskParameters,
} from '@tserve/contract';
import { JOB_NAME } from '@tserve/queue';
import type { GatewayConfig } from '@tserve/config';
import type { ModelRegistry } from './model-registry.js';
import type { QueueSet } from './queues.js';
import type { ResultRouter } from './result-router.js';
import type { RedisBreaker } from './breaker.js';

export interface InferenceCall {
  model: string;
  inputs: string[];
  parameters: Record<string, unknown>;
  /** The client's own deadline, if it asked for one; capped by REQUEST_TIMEOUT_MS. */
  timeoutMs?: number;
}

export interface InferenceResult {
  jobId: string;
  outputs: unknown[];
  warnings: string[];
  timing: JobTiming;
}

/** The request path: route to a served model, validate, shed, enqueue under the breaker, await by job id. */
export class InferenceService {
  constructor(
    private readonly config: GatewayConfig,
    private readonly registry: ModelRegistry,
    private readonly queues: QueueSet,
    private readonly router: ResultRouter,
    private readonly breaker: RedisBreaker,
  ) {}

  /** The model `POST /` serves: DEFAULT_MODEL, or the only one served. */
  defaultModel(): string {
    if (this.config.DEFAULT_MODEL) return this.config.DEFAULT_MODEL;
    const served = this.registry.served();
    if (served.length === 1) return served[0].id;
    if (served.length === 0) throw this.noWorkers();
    throw new ApiError(
      'validation',
      `several models are served (${served.map((m) => m.id).join(', ')}); use POST /models/<model id> or set DEFAULT_MODEL`,
    );
  }

  async infer(call: InferenceCall): Promise<InferenceResult> {
    const served = this.registry.get(call.model);
    if (!served) throw this.unknownModel(call.model);
    const parameters = this.checkParameters(served.task, call.parameters);
    if (call.inputs.length > this.config.MAX_INPUTS_PER_REQUEST) {
      throw new ApiError(
        'payload_too_large',
        `${call.inputs.length} inputs in one request; at most ${this.config.MAX_INPUTS_PER_REQUEST} are accepted (MAX_INPUTS_PER_REQUEST)`,
      );
    }
    if (served.depth >= this.config.MAX_QUEUE_DEPTH) {
      throw new ApiError('overloaded', `model ${call.model} has ${served.depth} requests waiting; retry shortly`, 1);
    }
    if (this.breaker.state() === 'open') throw this.breakerOpen();

    const timeout = Math.min(call.timeoutMs ?? this.config.REQUEST_TIMEOUT_MS, this.config.REQUEST_TIMEOUT_MS);
    const jobId = randomUUID();
    const now = Date.now();
    const data: InferenceJobData = {
      inputs: call.inputs,
      parameters,
      deadline: now + timeout,
      replyTo: this.router.channel,
      enqueuedAt: now,
    };
    const queue = this.queues.get(call.model);
    // Registered before the job exists, so even an instant answer finds its waiter.
    const answer = this.router.wait(jobId, queue, data.deadline);
    try {
      await this.breaker.guard(() => queue.add(JOB_NAME, data, { jobId }));
    } catch (err) {
      this.router.cancel(jobId);
      answer.catch(() => {});
      throw this.breaker.state() === 'open' ? this.breakerOpen() : new ApiError('unavailable', 'the queue is unavailable (Redis is not answering); retry shortly', 2);
    }
    this.registry.noteEnqueued(call.model);
    const outcome = await answer;
    if (!outcome.ok) throw ApiError.fromBody(outcome.error);
    return { jobId, outputs: outcome.outputs, warnings: outcome.warnings, timing: outcome.timing };
  }

  private checkParameters(task: keyof typeof parameterSchemas, parameters: Record<string, unknown>): TaskParameters {
    const parsed = parameterSchemas[task].safeParse(parameters);
    if (!parsed.success) throw new ApiError('validation', `invalid parameters for ${task}: ${describeIssues(parsed.error, 'parameters')}`);
    return parsed.data;
  }

  private breakerOpen(): ApiError {
    const seconds = Math.ceil(this.config.BREAKER_RESET_MS / 1000);
    return new ApiError('unavailable', 'the queue is unavailable (circuit breaker open after repeated Redis failures); retry shortly', seconds);
  }

  private noWorkers(): ApiError {
    if (!this.registry.healthy) return new ApiError('unavailable', 'cannot reach Redis to find the served models; retry shortly', 2);
    return new ApiError('unavailable', 'no worker is serving any model yet; retry shortly', 2);
  }

  private unknownModel(model: string): ApiError {
    if (this.registry.taskOf(model)) return new ApiError('unavailable', `no live worker serves model ${model} right now; retry shortly`, 2);
    if (!this.registry.healthy) return new ApiError('unavailable', 'cannot reach Redis to find the served models; retry shortly', 2);
    const served = this.registry.served().map((m) => m.id);
    return new ApiError('not_found', `model ${model} is not served; served models: ${served.length ? served.join(', ') : '(none)'}`);
  }
}
