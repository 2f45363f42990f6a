import type { Task } from './schemas.js';

/** One model in `GET /ready`: what its fields say depends on where the model stands. */
export interface ReadyModel {
  /** Served, or served earlier: the model's own task. */
  task?: Task;
  /** Live workers; 0 for a model loading, failed or lost. */
  workers: number;
  /** Served or scaled to zero: requests accepted and not yet answered, over all gateways. */
  queue_depth?: number;
  /** Served: of those, the requests this gateway holds, not yet sent to the queue (sent once a worker takes its last job). */
  held?: number;
  /** Served: its workers' `device/dtype`, each once. */
  devices?: string[];
  /** Served by a dtype whose answers shift with batch mates (q8): says so, and what to do. */
  warning?: string;
  /** Failed, or served only by workers of another wire protocol: why no worker serves it. */
  error?: string;
  /** Loading: seconds until its first worker is likely ready. */
  loading?: true;
  /** Configured (MODELS) with no worker at all: a request wakes one; estimated_time is its last measured load time. */
  scaled_to_zero?: true;
  estimated_time?: number;
  /** Loading: the download of its furthest-along worker, while one downloads the model's files. */
  download?: ReadyDownload;
  /** Served: the hub revision (commit id) and the sha256 of the weights file its workers loaded, where they agree. */
  revision?: string;
  weights_sha256?: string;
}

/** A model download in `GET /ready`. */
interface ReadyDownload {
  file: string;
  percent: number;
  bytes: number;
  total_bytes: number;
  bytes_per_second: number;
}

/** The body of `GET /ready` (200 when ready, 503 when not; `reasons` says what is missing). */
export interface ReadyBody {
  status: 'ready' | 'unavailable';
  reasons: string[];
  breaker: 'closed' | 'open' | 'half-open';
  models: Record<string, ReadyModel>;
}

/** The body of `GET /backlog?model=<id>`: what the autoscaler scales a model's workers on. */
export interface BacklogBody {
  model: string;
  /** Requests for the model accepted and not yet answered, over all gateways. */
  backlog: number;
}
