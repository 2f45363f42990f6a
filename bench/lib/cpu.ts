import fs from 'node:fs';

/**
 * Where the machine's CPU went during a measurement: each of our processes, and everything else.
 * On a 2-core box the load generator, Redis, the gateway and the worker all share the cores, so
 * "who used what" explains a result; "other" flags runs disturbed by something outside the bench.
 */

const TICK_MS = 10; // USER_HZ is 100 on Linux

interface Snapshot {
  at: number;
  busy: number;
  steal: number;
  procs: Record<string, number>;
}

export interface CpuUsage {
  /** Percent of one core, per process name. */
  procs: Record<string, number>;
  /** Machine busy (all cores) minus our processes, percent of one core. */
  other: number;
  /** Hypervisor steal, percent of one core. */
  steal: number;
  machine: number;
}

function machineTicks(): { busy: number; steal: number } {
  try {
    const line = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0];
    const [, user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).map(Number);
    return { busy: user + nice + system + irq + softirq, steal };
  } catch {
    return { busy: NaN, steal: NaN };
  }
}

function processTicks(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name may hold spaces; fields are counted after its closing parenthesis.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return NaN;
  }
}

export function sampleCpu(pids: Record<string, number | undefined>): Snapshot {
  const procs: Record<string, number> = {};
  for (const [name, pid] of Object.entries(pids)) if (pid) procs[name] = processTicks(pid);
  return { at: performance.now(), ...machineTicks(), procs };
}

export function cpuBetween(a: Snapshot, b: Snapshot): CpuUsage {
  const wallMs = b.at - a.at;
  const pct = (ticks: number) => Math.round(((ticks * TICK_MS) / wallMs) * 100);
  const procs: Record<string, number> = {};
  let ours = 0;
  for (const name of Object.keys(b.procs)) {
    const d = b.procs[name] - (a.procs[name] ?? NaN);
    if (Number.isFinite(d)) {
      procs[name] = pct(d);
      ours += d;
    }
  }
  const busy = b.busy - a.busy;
  return { procs, other: Math.max(0, pct(busy - ours)), steal: pct(b.steal - a.steal), machine: pct(busy) };
}

/** Resident memory of a process in MiB, from /proc/<pid>/status (VmRSS). */
export function rssMiB(pid: number | undefined): number | undefined {
  if (!pid) return undefined;
  try {
    const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Math.round((Number(match[1]) / 1024) * 10) / 10 : undefined;
  } catch {
    return undefined;
  }
}

/** The RSS readings of a series of samples that came back (a process gone or unreadable reads undefined). */
export function readMiB(samples: { mib: number | undefined }[]): number[] {
  return samples.map((x) => x.mib).filter((v): v is number => v !== undefined);
}

/** A figure taken while processes outside the bench used more than this (% of one core) is "disturbed". */
export const DISTURBED_PCT = 30;

/**
 * Waits (within a budget shared by the whole run) until nothing but this process keeps the CPU
 * busy: the server has drained the last point's requests before the in-process model runs (and
 * vice versa), and no point is measured while e.g. a test suite runs beside the bench. Also
 * hands out a bounded number of re-runs for measurements that were disturbed anyway.
 */
export class QuietGate {
  waitedMs = 0;
  retried = 0;
  constructor(
    private readonly budgetMs: number,
    private readonly maxRetries: number,
    private readonly maxOtherPct = 25,
  ) {}

  async settle(pids: Record<string, number | undefined>, maxMs = 10_000): Promise<number> {
    const until = performance.now() + Math.min(maxMs, Math.max(0, this.budgetMs - this.waitedMs));
    const started = performance.now();
    let other = NaN;
    do {
      const a = sampleCpu(pids);
      await new Promise((r) => setTimeout(r, 300));
      const usage = cpuBetween(a, sampleCpu(pids));
      other = usage.machine - (usage.procs.bench ?? 0);
    } while (other > this.maxOtherPct && performance.now() < until);
    this.waitedMs += performance.now() - started;
    return other;
  }

  takeRetry(): boolean {
    if (this.retried >= this.maxRetries) return false;
    this.retried++;
    return true;
  }
}

/** Runs `work` and reports the CPU used meanwhile by our processes and by everything else. */
export async function withCpu<T>(
  pids: Record<string, number | undefined>,
  work: () => Promise<T>,
): Promise<{ value: T; cpu: CpuUsage }> {
  const a = sampleCpu(pids);
  const value = await work();
  return { value, cpu: cpuBetween(a, sampleCpu(pids)) };
}
