/**
 * Worker settings for a host that runs the gateway, Redis and the workers together (`npm start`);
 * what the user sets in the environment overrides them.
 * - The model's threads yield (WORKER_NICE), so 503s and /health stay fast while the model
 *   saturates the cores. All the way (19): a spinning thread holds its core at its weight, and at
 *   10 two of them still kept the gateway and Redis waiting enough to shed slower and accept less
 *   (the A/B is in bench/README.md, "Workers beside their gateway on one host").
 * - A lone worker's threads also spin between the steps of a model call (INTRA_OP_SPINNING).
 *   Asleep, each step waits for its threads to wake, and on a VM those wakes lengthen a lone
 *   request (same section); yielding, they spin only on cores nothing else wants. Several workers
 *   each run a thread per core, so their spinning threads would hold the cores the others need.
 */
export function colocatedWorkerSettings(workers: number): Record<string, string> {
  return { WORKER_NICE: '19', ...(workers === 1 ? { INTRA_OP_SPINNING: 'true' } : {}) };
}
