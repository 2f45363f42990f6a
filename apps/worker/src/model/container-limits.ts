import fs from 'node:fs';
import os from 'node:os';

/**
 * What the container lets this process use, from its cgroup's files: the CPU quota and the memory
 * limit. ONNX Runtime counts the host's cores, not the quota, so a worker under a 2-CPU quota on a
 * 32-core host would start 32 threads that share 2 CPUs' time (TEI users see 6x slowdowns from this).
 */

const MiB = 2 ** 20;

/** Without a memory limit: the budget under which an all-MiniLM-L6-v2 worker peaked under 1 GB through the varied load (docs/memory.md). */
export const UNLIMITED_WORKER_MEMORY_MIB = 1024;

/** CPUs the quota in cgroup v2's cpu.max ("<quota> <period>", or "max <period>") allows, rounded down, at least 1, and no more than the affinity mask's; the mask's without a quota. */
export function usableCpus(cpuMax: string | undefined, affinityCpus: number): number {
  const [quota, period] = (cpuMax ?? '').trim().split(/\s+/);
  const allowed = Number(quota) / Number(period || 100_000);
  if (quota === undefined || quota === 'max' || !Number.isFinite(allowed) || allowed <= 0)
    return Math.max(1, affinityCpus);
  return Math.max(1, Math.min(affinityCpus, Math.floor(allowed)));
}

/** cgroup v1's CPU quota (cpu.cfs_quota_us, -1 for none, and cpu.cfs_period_us) as cgroup v2's cpu.max says it. */
export function cpuMaxFromV1(quotaUs: string | undefined, periodUs: string | undefined): string | undefined {
  if (quotaUs === undefined) return undefined;
  const quota = Number(quotaUs.trim());
  return quota > 0 ? `${quota} ${Number(periodUs?.trim()) || 100_000}` : 'max';
}

/** Past this, a memory limit is no limit: cgroup v1 says "none" as the largest page-aligned 64-bit count. */
const NO_LIMIT_BYTES = 2 ** 62;

/** The memory limit in bytes, from cgroup v2's memory.max or v1's memory.limit_in_bytes; undefined for "max" (no limit) or no file. */
export function memoryLimitBytes(memoryMax: string | undefined): number | undefined {
  const value = Number((memoryMax ?? '').trim());
  return memoryMax !== undefined &&
    memoryMax.trim() !== 'max' &&
    Number.isFinite(value) &&
    value > 0 &&
    value < NO_LIMIT_BYTES
    ? value
    : undefined;
}

/** WORKER_MEMORY_MB when unset: a quarter under the container's limit (the budget's estimate misses some; docs/memory.md), else UNLIMITED_WORKER_MEMORY_MIB. */
export function defaultWorkerMemoryMiB(limitBytes: number | undefined): number {
  return limitBytes === undefined ? UNLIMITED_WORKER_MEMORY_MIB : Math.max(1, Math.floor((limitBytes * 0.8) / MiB));
}

function readCgroup(file: string): string | undefined {
  try {
    return fs.readFileSync(`/sys/fs/cgroup/${file}`, 'utf8');
  } catch {
    return undefined;
  }
}

/** This process's limits, read now: cgroup v2's files, else v1's (hosts that still mount v1, as Docker on them does for containers). */
export function containerLimits(): { cpus: number; memoryLimitBytes: number | undefined } {
  const cpuMax =
    readCgroup('cpu.max') ?? cpuMaxFromV1(readCgroup('cpu/cpu.cfs_quota_us'), readCgroup('cpu/cpu.cfs_period_us'));
  const memoryMax = readCgroup('memory.max') ?? readCgroup('memory/memory.limit_in_bytes');
  return { cpus: usableCpus(cpuMax, os.availableParallelism()), memoryLimitBytes: memoryLimitBytes(memoryMax) };
}
