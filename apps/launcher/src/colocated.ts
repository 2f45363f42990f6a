import os from 'node:os';

/**
 * Worker settings for a host that runs the gateway, Redis and the workers together (`npm start`);
 * what the user sets in the environment overrides them.
 * - The model's threads yield (WORKER_NICE), so 503s and /health stay fast while the model
 *   saturates the cores. All the way (19): at 10, the model's threads still kept the gateway and
 *   Redis waiting enough to shed slower and accept less (bench/README.md, "Workers beside their
 *   gateway on one host").
 * - The workers' threads together leave one core to the gateway and Redis, which every request
 *   crosses twice: each worker runs (cores − 1) / workers threads, at least one. With every core
 *   (two threads on two cores), the model's threads and the gateway took turns on the same cores and
 *   the host answered fewer requests, at more CPU each (bench/README.md, "Threads on a shared host").
 * - Their threads do not spin (INTRA_OP_SPINNING's default): a spinning thread holds a core the
 *   gateway, Redis or another worker's threads want, and on a shared host it cost a lone request
 *   more CPU than the whole Python server spends on it (same section).
 */
export function colocatedWorkerSettings(workers: number, cpus = os.availableParallelism()): Record<string, string> {
  return { WORKER_NICE: '19', INTRA_OP_THREADS: String(threadsBeside(workers, cpus)) };
}

/** Threads for each of `workers` workers on `cpus` cores that they share with a gateway and Redis. */
export function threadsBeside(workers: number, cpus: number): number {
  return Math.max(1, Math.floor((cpus - 1) / Math.max(1, workers)));
}
