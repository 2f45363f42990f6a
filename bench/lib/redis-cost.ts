import { Redis } from 'ioredis';

/**
 * Redis's own count of the commands it ran and the CPU they took (`INFO commandstats`), commands
 * that BullMQ's Lua scripts call included. Unlike throughput, these figures do not move with the
 * machine's noise, so they are the measure of what a request costs the one Redis a cluster shares.
 */

export interface RedisCost {
  answered: number;
  commands: number;
  usec: number;
  commandsPerRequest: number;
  /** Command time per request as INFO commandstats sums it (see costPerRequest). */
  usecPerRequest: number;
  /** The redis-server process's CPU (user + system, networking included) per request. */
  processUsecPerRequest: number;
  /** Calls per answered request, by command, largest first. */
  byCommand: Record<string, number>;
  /** Command time (µs) per answered request, by command, in the same order. */
  usecByCommand: Record<string, number>;
}

interface CommandStat {
  calls: number;
  usec: number;
}

async function withRedis<T>(url: string, fn: (redis: Redis) => Promise<T>): Promise<T> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: true });
  redis.on('error', () => {});
  try {
    await redis.connect();
    return await fn(redis);
  } finally {
    redis.disconnect();
  }
}

export function resetRedisStats(url: string): Promise<unknown> {
  return withRedis(url, (redis) => redis.config('RESETSTAT'));
}

export interface RedisStats {
  commands: Map<string, CommandStat>;
  /** used_cpu_user + used_cpu_sys, in µs. */
  cpuUsec: number;
}

/** CPU used by Redis so far; sampled at the start of a window (commandstats are reset there instead). */
export async function readRedisCpu(url: string): Promise<number> {
  return cpuOf(await withRedis(url, (redis) => redis.info('cpu')));
}

/** Redis's used_memory in MiB: what its keys and buffers hold, the figure a job retention policy moves. */
export async function readRedisMiB(url: string): Promise<number> {
  const text = await withRedis(url, (redis) => redis.info('memory'));
  return Math.round(Number(/^used_memory:(\d+)/m.exec(text)?.[1] ?? NaN) / 2 ** 20);
}

function cpuOf(text: string): number {
  const get = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(text)?.[1] ?? NaN);
  return (get('used_cpu_user') + get('used_cpu_sys')) * 1e6;
}

export async function readRedisStats(url: string): Promise<RedisStats> {
  const [text, cpu] = await withRedis(url, (redis) => Promise.all([redis.info('commandstats'), redis.info('cpu')]));
  const stats = new Map<string, CommandStat>();
  for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    stats.set(match[1], { calls: Number(match[2]), usec: Number(match[3]) });
  }
  // The measuring itself is not the system's cost.
  for (const own of ['config|resetstat', 'config', 'info']) stats.delete(own);
  return { commands: stats, cpuUsec: cpuOf(cpu) };
}

/**
 * Per answered request. Command time is summed over all commands as commandstats reports them; a
 * script's inner commands are also inside its EVALSHA time, so this is an upper bound, measured the
 * same way before and after a change. The process CPU is the cost that really bounds a Redis.
 */
export function costPerRequest(stats: RedisStats, cpuAtStart: number, answered: number): RedisCost {
  let commands = 0;
  let usec = 0;
  const byCommand: Record<string, number> = {};
  const usecByCommand: Record<string, number> = {};
  for (const [name, s] of [...stats.commands.entries()].sort((a, b) => b[1].calls - a[1].calls)) {
    commands += s.calls;
    usec += s.usec;
    byCommand[name] = Math.round((s.calls / Math.max(1, answered)) * 100) / 100;
    usecByCommand[name] = Math.round((s.usec / Math.max(1, answered)) * 10) / 10;
  }
  const n = Math.max(1, answered);
  return {
    answered,
    commands,
    usec,
    commandsPerRequest: commands / n,
    usecPerRequest: usec / n,
    processUsecPerRequest: (stats.cpuUsec - cpuAtStart) / n,
    byCommand,
    usecByCommand,
  };
}
