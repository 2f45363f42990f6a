import type { Operation, Task, TaskInput, TaskParameters } from './schemas.js';
import type { ErrorBody } from './errors.js';
import type { DefaultScoreFunction } from './score-functions.js';

/** One client request inside a job: already validated, so the worker trusts it. */
export interface QueuedRequest {
  /** The gateway's request id (x-request-id): outcomes are routed back by it. */
  id: string;
  /** What to run: a task, or tokenization alone; the model's own task when absent. */
  task?: Operation;
  inputs: TaskInput[];
  parameters: TaskParameters;
  /** Model sequences the inputs run as, when more than one per input (pairs, labels, sentences): what batching counts. */
  sequences?: number;
  /** Epoch ms after which the request must not run: its client has been answered 504. */
  deadline: number;
  enqueuedAt: number;
}

/** Model sequences a queued request runs as: `sequences` when its inputs run as more (pairs, labels, sentences), else one per input. */
export function sequenceCount(request: Pick<QueuedRequest, 'inputs' | 'sequences'>): number {
  return request.sequences ?? request.inputs.length;
}

/** Characters of text a queued request carries (every string in its inputs): what it weighs in a Redis command. */
export function textLength(request: Pick<QueuedRequest, 'inputs'>): number {
  return charsIn(request.inputs);
}

function charsIn(value: unknown): number {
  if (typeof value === 'string') return value.length;
  if (typeof value !== 'object' || value === null) return 0;
  let n = 0;
  for (const v of Array.isArray(value) ? value : Object.values(value)) n += charsIn(v);
  return n;
}

/**
 * What the gateway enqueues: the requests for one model that arrived while its previous enqueue was
 * in flight, coalesced so that a burst costs one job's Redis commands instead of one per request.
 * Every request keeps its own id, deadline, parameters and outcome.
 */
export interface InferenceJobData {
  requests: QueuedRequest[];
  /** Pub/sub channel of the gateway instance waiting for these requests. */
  replyTo: string;
  /** The gateway holds requests back until told this job was taken (`JobsTaken`); it asks only with other requests outstanding, older gateways never. */
  tellTaken?: boolean;
  /** How long outcomes recorded apart from the job (JobRecorded) are kept (ms): as long as BullMQ keeps the completed job. */
  keepMs?: number;
}

export interface JobTiming {
  /** From enqueue to the start of the model call that ran it. */
  queue_ms: number;
  /** Model calls that ran this request's inputs, tokenization and post-processing included. */
  inference_ms: number;
  /** Sequences in the model call(s) that ran it; the largest if several. */
  batch_size: number;
}

export type RequestOutcome =
  | {
      id: string;
      ok: true;
      outputs: unknown[];
      warnings: string[];
      timing: JobTiming;
      /** Tokens the model read for this request, special tokens included (OpenAI's usage). */
      tokens?: number;
    }
  | { id: string; ok: false; error: ErrorBody };

/**
 * What a worker publishes once per job, and stores as the job's return value: one outcome per
 * request, in the job's order.
 */
export interface JobOutcome {
  job: string;
  model: string;
  outcomes: RequestOutcome[];
}

/**
 * The most bytes of a JobOutcome a worker publishes. Redis closes a subscriber whose unread output
 * passes 32 MB (its default client-output-buffer-limit for pub/sub), and with it every message on
 * its way to that gateway, whose requests then wait for the fallback read; one answer of
 * MAX_ANSWER_VALUES numbers is about 40 MB of JSON.
 */
export const OUTCOME_MESSAGE_MAX_BYTES = 1_048_576;

/**
 * What a worker publishes instead of a JobOutcome over OUTCOME_MESSAGE_MAX_BYTES, once it is
 * recorded, and what a BullMQ job then returns: the gateway reads the outcome at once where it is
 * recorded, a direct entry's state key or the job's own key (`keys.jobOutcome`; as the return
 * value, BullMQ would copy it into the queue's event stream, which keeps a hundred events whatever
 * their size). `requests` are the job's request ids, by which the gateway finds where it sent them.
 */
export interface JobRecorded {
  recorded: string;
  model: string;
  requests: string[];
}

/**
 * Interactive requests a gateway sends straight to its model's workers instead of as a BullMQ job:
 * an entry in the model's sorted set of direct requests, which an idle worker pops with the same
 * blocking call that waits for BullMQ's jobs. An entry carries what a job would have carried: a lone
 * request, or the requests that coalesced while the gateway's previous entry waited for a worker.
 * It costs a few plain commands where a job costs BullMQ's three scripts (about 40 commands).
 */
export interface DirectEntry {
  /** Its first request's id: the entry's state key, and the word that a worker took it, use it. */
  id: string;
  requests: QueuedRequest[];
  /** Pub/sub channel of the gateway instance waiting for it. */
  replyTo: string;
  /** How long the worker keeps the outcomes in the entry's state key, for the gateway's fallback read (ms). */
  keepMs: number;
  /** The gateway holds requests back until told this entry was taken (`JobsTaken`); absent, it does (older gateways always did). */
  tellTaken?: boolean;
}

/** The entry gateways sent before entries held several requests: one request. Workers still read it. */
export interface LoneDirectEntry {
  request: QueuedRequest;
  replyTo: string;
  keepMs: number;
}

/**
 * What a direct entry's state key holds: which worker took it (so the gateway can tell a worker
 * that died holding it), then its outcomes, which are also published.
 */
export type DirectState = { takenBy: string } | JobOutcome;

/**
 * What a worker publishes to a gateway when a batch holding jobs of that gateway's starts on the
 * model (a busy worker with peers: when it takes them): the requests the gateway held back behind
 * them may be sent now.
 */
export interface JobsTaken {
  taken: string[];
}

/**
 * A job that failed as a whole keeps the reason as text in BullMQ (its failedReason); these write
 * and read that text, so the gateway can answer each of the job's requests with the error and
 * status. Workers settle every job as completed, with an outcome per request (failures included),
 * so today the only failed jobs are those BullMQ fails itself (a job that stalled too often); the
 * decoder reads its plain-text reasons too.
 */
export function encodeJobFailure(error: ErrorBody): string {
  return JSON.stringify(error);
}

export function decodeJobFailure(reason: string): ErrorBody {
  try {
    const body = JSON.parse(reason) as ErrorBody;
    if (typeof body.error === 'string' && typeof body.error_type === 'string') return body;
  } catch {
    // Not written by a worker (e.g. BullMQ's own "job stalled more than allowable limit").
  }
  return { error: `the job failed: ${reason}`, error_type: 'internal' };
}

/**
 * Channel on which gateways tell a model's workers that a request's client went away, so a
 * request not yet run is skipped. Best effort: a worker that misses it just computes the answer.
 */
export interface CancelNotice {
  ids: string[];
  /** The latest of their deadlines (epoch ms): past it a worker drops them unrun anyway, and forgets the notice. Absent from older gateways. */
  deadline?: number;
}

/** What a worker announces in Redis; the gateway learns the served models from these alone. */
export interface WorkerInfo {
  id: string;
  model: string;
  /**
   * A worker announces itself while it loads its model, so that the gateway can say so (503 loading,
   * not 404). One that is stopping (`draining`) takes nothing new and finishes what it holds: gateways
   * route nothing to it, but still count it live for the direct requests it holds.
   */
  state: 'loading' | 'ready' | 'draining';
  /** Known once the model's config is read: the task its architecture was trained for. */
  task?: Task;
  /** Every task the model can serve (an embedding model also serves sentence-similarity). */
  tasks?: Task[];
  /** The classifier's labels in output order, for classification models. */
  labels?: string[];
  /** The function text-classification applies to the logits when a request names none (absent from older workers). */
  scoreFunction?: DefaultScoreFunction;
  dtype: string;
  device: string;
  pid: number;
  host: string;
  startedAt: number;
  batchMaxSize: number;
  /** Padded tokens one model call may hold (BATCH_MAX_TOKENS). */
  batchMaxTokens?: number;
  /** Longest sequence the model accepts, in tokens. */
  maxTokens: number;
  /** Tells gateways when it starts running their jobs (`JobsTaken`); a gateway holds requests back only for models whose workers all do. */
  tellsTaken?: boolean;
  /** Pops direct entries beside BullMQ's jobs; a gateway sends them only to models whose workers all do. */
  takesDirect?: boolean;
  /** Reads direct entries of several requests (`DirectEntry`); workers before it read only `LoneDirectEntry`. */
  takesDirectGroups?: boolean;
  /**
   * Milliseconds the model has spent in calls since the worker started, as of this announcement: its
   * rate is the share of time the model computed (below 1, it waited for work). Absent from older
   * workers.
   */
  modelBusyMs?: number;
}
