import {
  ApiError,
  PROTOCOL,
  type DefaultScoreFunction,
  type ModelDownload,
  type Task,
  type WorkerInfo,
} from '@tserve/contract';
import type { LoadFailure } from '@tserve/queue';

/**
 * What a model is to the gateway, as its workers' heartbeats announce it, and how those heartbeats
 * are read: which models are served, still loading, or announced only by workers of another wire
 * protocol.
 */

export interface ServedModel {
  id: string;
  /** The model's own task: what a request that names none runs. */
  task: Task;
  /** Every task it serves, its own first. */
  tasks: Task[];
  /** It serves sparse vectors (embed-sparse): a masked-LM model with SPLADE pooling. */
  sparse: boolean;
  /** A classifier's labels, in output order. */
  labels?: string[];
  /** The function a text-classification call applies to the logits by default, if the workers said. */
  scoreFunction?: DefaultScoreFunction;
  /** Longest sequence the model accepts, in tokens. */
  maxLength: number;
  /** The names of its prompts (an embedding model's), which a request's prompt_name picks from; none: []. */
  promptNames: string[];
  /** The sizes its vectors may be shortened to (MATRYOSHKA_DIMENSIONS), largest first; none: []. */
  matryoshkaDimensions: number[];
  workers: WorkerInfo[];
  /** Most sequences one job for it carries: the smallest of its workers' batches, so that a job never spans two. */
  jobSequences: number;
  /** The weights its workers loaded, where they all agree (a rollout may mix two for a while). */
  weights: ModelWeights;
}

/** Which weights answer: the hub revision (a commit id where known) and the weights file's sha256. */
export interface ModelWeights {
  revision?: string;
  sha256?: string;
  /** What runs (WorkerInfo.weightsFile). */
  file?: string;
}

/** Workers of a model that speak another wire protocol: this gateway sends them nothing. */
export interface MismatchedModel {
  id: string;
  /** Their protocol numbers, each once. */
  protocols: number[];
  /** Why they get no work from this gateway, in a sentence. */
  reason: string;
}

/**
 * A model whose first worker is still to come: announced by workers still loading it, or, scaled to
 * zero, configured (MODELS) with no worker at all, while the autoscaler starts one.
 */
export interface LoadingModel {
  id: string;
  /** Configured and no worker runs: one is still to be started (by the autoscaler, on the backlog). */
  idle?: true;
  /**
   * Seconds until the first of its workers is likely ready: the rest of its download at the rate
   * measured, then its last measured load time, less the time spent loading so far.
   */
  estimatedSeconds: number;
  /** The download of the worker likely ready first, while it downloads the model's files. */
  download?: ModelDownload;
}

/**
 * What the registry knows of one model, in one answer. `last` is the model as its workers last
 * announced it, where none is live, loading or of another protocol: the response cache may still
 * answer what they computed.
 */
export type ModelStatus =
  | { kind: 'served'; model: ServedModel }
  /** Its first worker is still to come: loading, or configured with none (scaled to zero). */
  | { kind: 'starting'; starting: LoadingModel; last?: ServedModel }
  /** Announced only by workers of another protocol. */
  | { kind: 'mismatched'; mismatch: MismatchedModel }
  /** Its worker could not load it, and none serves it since. */
  | { kind: 'failed'; failure: LoadFailure; last?: ServedModel }
  /** Served earlier, and no live worker serves it now. */
  | { kind: 'lost'; last?: ServedModel }
  /** Not known, and Redis cannot be read to know better. */
  | { kind: 'unreachable'; last?: ServedModel }
  | { kind: 'unknown'; last?: ServedModel };

/** Why nothing can be said of the served models: the registry cannot read Redis. */
export const registryUnreachable = () =>
  new ApiError('unavailable', 'cannot reach Redis to find the served models; retry shortly', 2);

/** Why a model no worker serves, and none is to come (a starting one is waited for), is refused; `served`: those served now. */
export function refusal(
  model: string,
  status: Exclude<ModelStatus, { kind: 'served' | 'starting' }>,
  served: ServedModel[],
): ApiError {
  switch (status.kind) {
    case 'mismatched':
      return new ApiError('unavailable', status.mismatch.reason, 5);
    case 'failed':
      return new ApiError(
        'unavailable',
        `model ${model} is not served: its worker could not load it (${status.failure.reason})`,
        5,
      );
    case 'lost':
      return new ApiError('unavailable', `no live worker serves model ${model} right now; retry shortly`, 2);
    case 'unreachable':
      return registryUnreachable();
    case 'unknown': {
      const ids = served.map((m) => m.id);
      return new ApiError(
        'not_found',
        `model ${model} is not served; served models: ${ids.length ? ids.join(', ') : '(none)'}`,
      );
    }
  }
}

/** A loading model's estimate when no load of it has been measured yet, in seconds. */
export const UNKNOWN_LOAD_SECONDS = 20;

/**
 * The models the live workers' heartbeats announce: served (with their agreed weights), still
 * loading (with the soonest estimate of ready), or only by workers of another protocol.
 */
export function readHeartbeats(
  workers: WorkerInfo[],
  loadTimes: Map<string, number>,
): { byModel: Map<string, ServedModel>; loading: Map<string, LoadingModel>; foreign: Map<string, Set<number>> } {
  const byModel = new Map<string, ServedModel>();
  const loading = new Map<string, LoadingModel>();
  const foreign = new Map<string, Set<number>>();
  for (const w of workers) {
    // Its queue is not ours (queueNameFor names the protocol): it would never see our jobs.
    if (w.protocol !== PROTOCOL) {
      foreign.set(w.model, (foreign.get(w.model) ?? new Set<number>()).add(w.protocol));
      continue;
    }
    // Finishing what it holds, serving nothing new.
    if (w.state === 'draining') continue;
    if (w.state === 'loading' || !w.task) {
      const left = secondsToReady(w, loadTimes.get(w.model));
      const entry = loading.get(w.model);
      if (!entry || left < entry.estimatedSeconds) {
        const download = w.download && w.download.doneAt === undefined ? w.download : undefined;
        loading.set(w.model, { id: w.model, estimatedSeconds: left, ...(download ? { download } : {}) });
      }
      continue;
    }
    const entry = byModel.get(w.model) ?? {
      id: w.model,
      task: w.task,
      tasks: w.tasks ?? [w.task],
      sparse: w.sparse === true,
      labels: w.labels,
      scoreFunction: w.scoreFunction,
      maxLength: w.maxTokens,
      promptNames: w.promptNames ?? [],
      matryoshkaDimensions: w.matryoshkaDimensions ?? [],
      workers: [],
      jobSequences: w.batchMaxSize,
      weights: {},
    };
    entry.workers.push(w);
    entry.jobSequences = Math.min(entry.jobSequences, w.batchMaxSize);
    byModel.set(w.model, entry);
  }
  for (const m of byModel.values()) m.weights = agreedWeights(m.workers);
  return { byModel, loading, foreign };
}

/** A loading worker's seconds to ready: the rest of its download at its measured rate, then its load. */
function secondsToReady(w: WorkerInfo, knownLoadMs: number | undefined): number {
  const now = Date.now();
  const d = w.download;
  if (d && d.doneAt === undefined) {
    const rest = Math.max(0, d.totalBytes - d.bytes);
    const downloadSeconds = rest === 0 ? 0 : d.bytesPerSecond > 0 ? rest / d.bytesPerSecond : UNKNOWN_LOAD_SECONDS;
    return Math.max(1, Math.ceil(downloadSeconds + (knownLoadMs ?? UNKNOWN_LOAD_SECONDS * 1000) / 1000));
  }
  if (knownLoadMs === undefined) return UNKNOWN_LOAD_SECONDS;
  // Loading began when the download ended, if there was one.
  return Math.max(1, Math.ceil((knownLoadMs - (now - (d?.doneAt ?? w.startedAt))) / 1000));
}

/** The revision and weights hash every worker announces; a field they differ on is left out. */
function agreedWeights(workers: WorkerInfo[]): ModelWeights {
  const one = (values: Array<string | undefined>) => (new Set(values).size === 1 ? values[0] : undefined);
  const revision = one(workers.map((w) => w.revision));
  const sha256 = one(workers.map((w) => w.weightsSha256));
  const file = one(workers.map((w) => w.weightsFile));
  return { ...(revision ? { revision } : {}), ...(sha256 ? { sha256 } : {}), ...(file ? { file } : {}) };
}

export function mismatchOf(model: string, protocols: number[]): MismatchedModel {
  const theirs = protocols.join(', ');
  return {
    id: model,
    protocols,
    reason: `model ${model} is served only by workers of wire protocol ${theirs}; this gateway speaks protocol ${PROTOCOL} and sends them no work (run gateways and workers of one release)`,
  };
}
