import { z } from 'zod';
import { PRIORITIES, type Operation, type Priority, type TaskInput, type TaskParameters } from './schemas.js';
import { ERROR_STATUS, type ErrorBody, type ErrorType } from './errors.js';

/**
 * The messages gateways and workers exchange through Redis, each tagged with its `kind` and
 * checked against its schema where it is read. The wire is versioned by one number, PROTOCOL:
 * every job and every worker's announcement carries it, a model's queue is named with it
 * (`queueNameFor`), and a gateway routes only to workers of its own number. Change it whenever
 * a message changes shape; there is no other compatibility code.
 */
export const PROTOCOL = 5;

/** One client request inside a job: already validated by the gateway, so the worker trusts its inputs. */
export interface QueuedRequest {
  /** The gateway's request id (x-request-id): outcomes are routed back by it. */
  id: string;
  /** What to run: a task, or tokenization alone; the model's own task when absent. */
  task?: Operation;
  inputs: TaskInput[];
  parameters: TaskParameters;
  /** Model sequences the inputs run as, when more than one per input (pairs, labels, sentences): what batching counts. */
  sequences?: number;
  /**
   * The client's request was cut into this many pieces, this request one of them (a list larger
   * than a job): its answer may hold only its share of the numbers one answer may hold, so that
   * the pieces together hold no more than one request's.
   */
  pieces?: number;
  /** Epoch ms after which the request must not run: its client has been answered 504. */
  deadline: number;
  enqueuedAt: number;
  /**
   * The W3C trace context (`traceparent`, `tracestate`) of the gateway's span that sent it, where the
   * gateway traces: the worker's spans for it join the client's trace. Optional, so a reader that
   * predates it drops it and one that knows it reads jobs without it alike.
   */
  trace?: Record<string, string>;
}

/** Model sequences a queued request runs as: `sequences` when its inputs run as more (pairs, labels, sentences), else one per input. */
export function sequenceCount(request: Pick<QueuedRequest, 'inputs' | 'sequences'>): number {
  return request.sequences ?? request.inputs.length;
}

/**
 * `items` in order, in groups of at most `max` by `sizeOf` each; an item larger than `max` goes
 * alone. How a gateway cuts requests into jobs, and a large request into parts, by sequences.
 */
export function inGroups<T>(items: readonly T[], sizeOf: (item: T) => number, max: number): T[][] {
  const groups: T[][] = [];
  let current: T[] = [];
  let size = 0;
  for (const item of items) {
    const n = sizeOf(item);
    if (current.length > 0 && size + n > max) {
      groups.push(current);
      current = [];
      size = 0;
    }
    current.push(item);
    size += n;
  }
  if (current.length > 0) groups.push(current);
  return groups;
}

/** Characters of text a queued request carries (every string and token id in its inputs): what it weighs in a Redis command. */
export function textLength(request: Pick<QueuedRequest, 'inputs'>): number {
  return charsIn(request.inputs);
}

function charsIn(value: unknown): number {
  if (typeof value === 'string') return value.length;
  // A token id (decode's inputs), with the comma that follows it.
  if (typeof value === 'number') return String(value).length + 1;
  if (typeof value !== 'object' || value === null) return 0;
  let n = 0;
  for (const v of Array.isArray(value) ? value : Object.values(value)) n += charsIn(v);
  return n;
}

// The gateway checked inputs and parameters against the task's own schemas; here only their form.
const queuedRequestSchema = z.object({
  id: z.string(),
  task: (z.string() as unknown as z.ZodType<Operation>).optional(),
  inputs: z.array(z.unknown()) as unknown as z.ZodType<TaskInput[]>,
  parameters: z.custom<TaskParameters>((value) => typeof value === 'object' && value !== null && !Array.isArray(value)),
  sequences: z.number().int().positive().optional(),
  pieces: z.number().int().positive().optional(),
  deadline: z.number(),
  enqueuedAt: z.number(),
  trace: z.record(z.string(), z.string()).optional(),
}) satisfies z.ZodType<QueuedRequest>;

/**
 * A BullMQ job's data: the requests for one model that arrived while the gateway's previous job for
 * it was on its way, coalesced so that a burst costs one job's Redis commands instead of one per
 * request. Every request keeps its own id, deadline, parameters and outcome.
 */
export const jobDataSchema = z.object({
  kind: z.literal('job'),
  protocol: z.number().int(),
  requests: z.array(queuedRequestSchema).min(1),
  /** Pub/sub channel of the gateway waiting for these requests. */
  replyTo: z.string(),
  /** The gateway holds later requests back until told this job was taken (`JobsTaken`). */
  tellTaken: z.boolean(),
  /** How long an outcome recorded apart from the job (`JobRecorded`) is kept (ms): as long as BullMQ keeps the completed job. */
  keepMs: z.number().int().nonnegative(),
});
export type JobData = z.infer<typeof jobDataSchema>;

export interface RequestTiming {
  /** From enqueue to the start of the model call that ran it. */
  queue_ms: number;
  /** Model calls that ran this request's inputs, tokenization and post-processing included. */
  inference_ms: number;
  /** Sequences in the model call(s) that ran it; the largest if several. */
  batch_size: number;
}

const errorBodySchema = z.object({
  error: z.string(),
  error_type: z.enum(Object.keys(ERROR_STATUS) as [ErrorType, ...ErrorType[]]),
  estimated_time: z.number().optional(),
}) satisfies z.ZodType<ErrorBody>;

const answeredSchema = z.object({
  id: z.string(),
  ok: z.literal(true),
  outputs: z.array(z.unknown()),
  warnings: z.array(z.string()),
  timing: z.object({ queue_ms: z.number(), inference_ms: z.number(), batch_size: z.number() }),
  /**
   * Tokens the model read for each input, special tokens included (OpenAI's usage): per input, so
   * that an answer kept in the response cache keeps its own count.
   */
  tokens: z.array(z.number()).optional(),
});
const refusedSchema = z.object({ id: z.string(), ok: z.literal(false), error: errorBodySchema });
const requestOutcomeSchema = z.discriminatedUnion('ok', [answeredSchema, refusedSchema]);
export type RequestOutcome = z.infer<typeof requestOutcomeSchema>;

/** What a worker publishes once per job, and stores as the job's return value: one outcome per request, in the job's order. */
const jobOutcomeSchema = z.object({
  kind: z.literal('outcome'),
  job: z.string(),
  model: z.string(),
  outcomes: z.array(requestOutcomeSchema),
});
export type JobOutcome = z.infer<typeof jobOutcomeSchema>;

/**
 * The most bytes of a JobOutcome a worker publishes. Redis closes a subscriber whose unread output
 * passes 32 MB (its default client-output-buffer-limit for pub/sub), and with it every message on
 * its way to that gateway, whose requests would then wait for the fallback read.
 */
export const OUTCOME_MESSAGE_MAX_BYTES = 1_048_576;

/**
 * What a worker publishes instead of a JobOutcome over OUTCOME_MESSAGE_MAX_BYTES, once the outcome
 * is recorded under `keys.jobOutcome` (as the job's return value, BullMQ would copy it into the
 * queue's event stream), and what the job then returns. `requests` are the job's request ids.
 */
const jobRecordedSchema = z.object({
  kind: z.literal('recorded'),
  job: z.string(),
  model: z.string(),
  requests: z.array(z.string()),
});
export type JobRecorded = z.infer<typeof jobRecordedSchema>;

/**
 * What a worker publishes to a gateway as a model batch holding that gateway's jobs starts (or, for
 * a busy worker with peers, as it takes them): the requests held back behind them may go now.
 */
const jobsTakenSchema = z.object({ kind: z.literal('taken'), jobs: z.array(z.string()) });
export type JobsTaken = z.infer<typeof jobsTakenSchema>;

/** Everything a worker tells a gateway on its result channel. */
export type ResultMessage = JobOutcome | JobRecorded | JobsTaken;

/**
 * A result message's head as a gateway reads it (recorded-outcome.ts): a JobOutcome's with each
 * answered request's outputs taken out and the byte length of each output's JSON in their place.
 */
const outcomeHeadSchema = jobOutcomeSchema.extend({
  outcomes: z.array(
    z.discriminatedUnion('ok', [
      answeredSchema.omit({ outputs: true }).extend({ outputBytes: z.array(z.number().int().nonnegative()) }),
      refusedSchema,
    ]),
  ),
});
export type OutcomeHead = z.infer<typeof outcomeHeadSchema>;
export const resultHeadSchema = z.discriminatedUnion('kind', [outcomeHeadSchema, jobRecordedSchema, jobsTakenSchema]);

/** A completed job's return value: its outcome, or where it is recorded. */
export const jobReturnSchema = z.discriminatedUnion('kind', [jobOutcomeSchema, jobRecordedSchema]);

/** A message heard on a channel, read against its schema: undefined where it is not JSON, or not of that shape. */
export function readMessage<T>(schema: z.ZodType<T>, text: string): T | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  const message = schema.safeParse(parsed);
  return message.success ? message.data : undefined;
}

/**
 * Published on a model's cancellation channel by a gateway whose client went away, so that a
 * worker skips the requests it has not run yet. Best effort: a worker that misses it computes.
 */
export const cancelNoticeSchema = z.object({
  kind: z.literal('cancel'),
  ids: z.array(z.string()),
  /** The latest of their deadlines (epoch ms): past it a worker drops them unrun anyway, and forgets the notice. */
  deadline: z.number(),
});
export type CancelNotice = z.infer<typeof cancelNoticeSchema>;

/**
 * Published on a model's work channel by a gateway once it has added jobs to the model's queue: the
 * model's idle workers fetch on hearing it, and otherwise leave Redis alone. Best effort: a worker
 * that misses one finds the jobs at its next idle poll, or while it fetches for a busy model.
 */
export const workNoticeSchema = z.object({
  kind: z.literal('work'),
  /** Jobs just added. */
  jobs: z.number().int().positive(),
  /**
   * Their class: a worker running bulk work lets interactive jobs go ahead of its next model
   * call. Optional (a gateway always sends it): a worker that does not know it is no worse off.
   */
  priority: z.enum(PRIORITIES).optional(),
  /**
   * The job itself, where the notice announces one small interactive job: a worker that waits alone
   * on the model starts it at once from this copy, while it fetches it, and answers only once the
   * fetch has brought it. Read as a job is (jobDataSchema) by the worker that uses it.
   */
  job: z.object({ id: z.string(), data: z.unknown() }).optional(),
});
export type WorkNotice = z.infer<typeof workNoticeSchema>;

/**
 * The copy of its job that a work notice carries, where the job is one small interactive request
 * sent alone, as to an idle model. Requests sent together go to a busy worker, which would only
 * drop the copy; and past a lone request's size, a copy costs every worker's subscriber more than
 * the fetch it saves.
 */
export function noticeCopy(priority: Priority, jobs: Array<{ id: string; data: JobData }>): Pick<WorkNotice, 'job'> {
  const [job, ...more] = jobs;
  const [request, ...others] = job.data.requests;
  const lone = priority === 'interactive' && more.length === 0 && others.length === 0;
  return lone && textLength(request) <= 2048 ? { job } : {};
}

/**
 * A job that failed as a whole keeps the reason as text in BullMQ (its failedReason); these write
 * and read that text, so the gateway can answer each of the job's requests with the error and
 * status. Workers settle every job they can read as completed, with an outcome per request
 * (failures included); the failed jobs are those a worker cannot read, and those BullMQ fails
 * itself (a job that stalled too often), whose plain-text reasons the decoder reads too.
 */
export function encodeJobFailure(error: ErrorBody): string {
  return JSON.stringify(error);
}

export function decodeJobFailure(reason: string): ErrorBody {
  try {
    const body = errorBodySchema.safeParse(JSON.parse(reason));
    if (body.success) return body.data;
  } catch {
    // Not JSON: BullMQ's own reason, e.g. "job stalled more than allowable limit".
  }
  return { error: `the job failed: ${reason}`, error_type: 'internal' };
}
