import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { checkRedis, describeTarget, redisAnswers, throughSentinels, type RedisSettings } from '@tserve/queue';

function onPath(bin: string): boolean {
  return spawnSync('sh', ['-c', `command -v "${bin}"`], { stdio: 'ignore' }).status === 0;
}

export class RedisUnavailable extends Error {}

/**
 * Redis at REDIS_URL (or the primary REDIS_SENTINELS name), or, when nothing answers there and it is
 * a plain local address, an embedded redis-server started for this run (no persistence: the queue
 * holds only requests in flight). A Redis that answers and refuses the settings (a password, a
 * certificate) stops the launcher with the reason: starting another would not help.
 */
export async function ensureRedis(
  settings: RedisSettings,
  bin: string,
  log: (msg: string) => void,
): Promise<ChildProcess | undefined> {
  const check = await checkRedis(settings);
  if (check.state === 'answers') return undefined;
  if (check.state === 'refused') throw new RedisUnavailable(check.error.message);
  const url = settings.REDIS_URL;
  const parsed = new URL(url);
  // Only the single-server default is started here: not a TLS one, nor a primary the sentinels keep.
  const local =
    !throughSentinels(settings) &&
    parsed.protocol === 'redis:' &&
    ['127.0.0.1', 'localhost', '::1', '[::1]'].includes(parsed.hostname);
  if (!local || !onPath(bin)) {
    const where = describeTarget(settings);
    throw new RedisUnavailable(
      `nothing answers at ${where} (${check.reason})` +
        (local
          ? ` and "${bin}" is not on PATH.\nInstall Redis (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) or point REDIS_URL at one.`
          : '.\nStart that Redis or point REDIS_URL (or REDIS_SENTINELS) at one that runs.'),
    );
  }
  const port = parsed.port || '6379';
  log(`no Redis at ${url}; starting ${bin} on port ${port}`);
  const child = spawn(
    bin,
    ['--port', port, '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--maxmemory-policy', 'noeviction'],
    {
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  for (let i = 0; i < 50; i++) {
    if (await redisAnswers(url, 200)) return child;
    if (child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  child.kill('SIGKILL');
  throw new RedisUnavailable(`started ${bin} on port ${port} but it does not answer`);
}

/**
 * Stops the Redis this launcher started and waits until it has exited, killing it after `timeoutMs`:
 * once the launcher has exited (and npm with it) the system counts as stopped, and one started again
 * at once must not find the old Redis still answering on its port, about to go.
 */
export async function stopRedis(child: ChildProcess, timeoutMs = 5_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  await exited;
  clearTimeout(timer);
}
