import os from 'node:os';

/**
 * Worker settings for a host that runs the gateway, Redis and the workers together (`npm start`);
 * what the user sets in the environment overrides them.
 * - The model's threads yield (WORKER_NICE), so 503s and /health stay fast while the model
 *   saturates the cores. All the way (19): at 10, the model's threads still kept the gateway and
 *   Redis waiting enough to shed slower and accept less (bench/README.md, "Workers beside their
 *   gateway on one host").
 * - The workers share the cores: each runs cores / workers threads, at least one. Leaving a core to
 *   the gateway and Redis saved CPU on short texts but cost a quarter to a half of the throughput on
 *   long ones, where the model is most of the work (bench/README.md, "Threads on a shared host").
 * - Their threads do not spin (INTRA_OP_SPINNING's default): a spinning thread holds a core the
 *   gateway, Redis or another worker's threads want; without spinning the host answered as many
 *   requests or more, at 0.76–0.98× the CPU each (same section).
 */
export function colocatedWorkerSettings(workers: number, cpus = os.availableParallelism()): Record<string, string> {
  return { WORKER_NICE: '19', INTRA_OP_THREADS: String(threadsBeside(workers, cpus)) };
}

/** Threads for each of `workers` workers that share `cpus` cores. */
export function threadsBeside(workers: number, cpus: number): number {
  return Math.max(1, Math.floor(cpus / Math.max(1, workers)));
}
