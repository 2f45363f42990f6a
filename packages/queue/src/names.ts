import { PROTOCOL } from '@tserve/contract';

/**
 * Where things live in Redis. Every key starts with the configured prefix, so several
 * deployments (or test runs) can share one Redis without seeing each other.
 */

/**
 * One BullMQ queue per model and wire version: a worker never sees a job of another protocol.
 * Model ids hold a '/', which BullMQ keys should not; '--' is the hub cache's own spelling.
 */
export function queueNameFor(model: string): string {
  return `models--${model.replaceAll('/', '--')}--p${PROTOCOL}`;
}

export const keys = {
  /** Set of worker ids that have announced themselves (some may have expired). */
  workers: (prefix: string) => `${prefix}:workers`,
  /** One worker's announcement; expires unless renewed, so a killed worker disappears by itself. */
  worker: (prefix: string, id: string) => `${prefix}:worker:${id}`,
  /** Sorted set: ids of a model's ready workers, scored by when their announcement lapses (Redis's clock). */
  readyWorkers: (prefix: string, model: string) => `${prefix}:ready-workers:${queueNameFor(model)}`,
  /** Hash: model → why its worker could not load it. Lets the gateway answer 503 (not 404) and say why. */
  loadFailures: (prefix: string) => `${prefix}:load-failures`,
  /** Hash: model → how long its last worker took to load it (ms), for a loading model's estimated_time. */
  loadTimes: (prefix: string) => `${prefix}:load-times`,
  /** Pub/sub channel on which workers publish the outcomes for one gateway instance. */
  results: (prefix: string, gatewayId: string) => `${prefix}:results:${gatewayId}`,
  /** Hash: gateway id → its outstanding requests for the model, for cluster-wide load shedding. */
  depth: (prefix: string, model: string) => `${prefix}:depth:${queueNameFor(model)}`,
  /** A BullMQ job's JobOutcome too large for its return value, which BullMQ copies into the queue's event stream (JobRecorded); expires. */
  jobOutcome: (prefix: string, jobId: string) => `${prefix}:job-outcome:${jobId}`,
  /** Pub/sub channel on which gateways name a model's requests whose clients went away (CancelNotice). */
  cancellations: (prefix: string, model: string) => `${prefix}:cancel:${queueNameFor(model)}`,
  /** Pub/sub channel on which gateways tell a model's workers that they added jobs (WorkNotice). */
  work: (prefix: string, model: string) => `${prefix}:work:${queueNameFor(model)}`,
  /**
   * Prefix of the response cache's keys (its entries, their index and byte count): apart from the
   * queues', and evicted by the cache's own bound, never by Redis's maxmemory-policy.
   */
  responseCache: (prefix: string) => `${prefix}:response-cache`,
};

export const JOB_NAME = 'infer';
