#!/usr/bin/env node
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ConfigError, formatHelp, loadGatewayConfig, loadLauncherConfig } from '@tserve/config';
import { colocatedWorkerSettings } from './colocated.js';
import { ensureRedis, RedisUnavailable, stopRedis } from './redis.js';
import { Supervisor } from './supervisor.js';

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(
    formatHelp(
      'npm start, or tserve from the release archive: runs the whole system locally: Redis (when none answers), the gateway\n' +
        'and WORKERS workers per model.\n\n' +
        'Usage: [MODEL=a,b] [WORKERS=N] [MODEL_DIR=../shared/models] npm start\n' +
        '       [MODEL=a,b] [WORKERS=N] [MODEL_DIR=/srv/models] tserve/bin/tserve',
      ['launcher', 'gateway', 'worker', 'common'],
    ),
  );
  process.exit(0);
}

const log = (msg: string) => process.stderr.write(`[launcher] ${msg}\n`);
/** A program's entry: its bundle beside the launcher's in the release archive, else its app's build output. */
function script(app: string): string {
  const bundled = fileURLToPath(new URL(`./${app}.js`, import.meta.url));
  return fs.existsSync(bundled) ? bundled : fileURLToPath(new URL(`../../${app}/dist/main.js`, import.meta.url));
}

async function main(): Promise<void> {
  const config = loadLauncherConfig();
  const redis = await ensureRedis(config, config.REDIS_SERVER_BIN, log);
  let stopping = false;
  const stop = async (why: string, code: number) => {
    if (stopping) return;
    stopping = true;
    log(why);
    await supervisor.stopAll();
    if (redis) await stopRedis(redis);
    process.exit(code);
  };
  const supervisor = new Supervisor(log, (reason) => void stop(`${reason}; stopping everything`, 1));
  const env = { ...process.env, REDIS_URL: config.REDIS_URL };

  supervisor.start({
    name: 'gateway',
    script: script('gateway'),
    env: { ...env, DEFAULT_MODEL: process.env.DEFAULT_MODEL ?? config.models[0] },
    essential: true,
  });
  const workerEnv = { ...colocatedWorkerSettings(config.models.length * config.WORKERS), ...env };
  for (const model of config.models) {
    for (let i = 0; i < config.WORKERS; i++) {
      supervisor.start({
        name: `worker ${model} #${i + 1}`,
        script: script('worker'),
        env: { ...workerEnv, MODEL: model },
        essential: false,
      });
    }
  }
  log(`started gateway and ${config.WORKERS} worker(s) for ${config.models.join(', ')}; Ctrl-C stops everything`);
  if (config.WORKERS > 0) void announceReady(config.models, () => stopping);

  // `npm start` runs this as `sh -c "exec node …"`, and the exec matters: npm forwards SIGINT and
  // SIGTERM only to its own child, the shell. A shell that forks the command (dash does) dies of
  // SIGTERM, leaving this launcher and everything it started running without a parent, and waits
  // out SIGINT; either way the signal never arrives here. With exec, npm's child is this process,
  // so what a process manager or script sends to npm reaches it, through any shell npm is set to
  // use. Watching the parent instead would miss SIGINT (the shell stays), could only poll, and
  // would stop a launcher someone ran under nohup.
  process.on('SIGINT', () => void stop('SIGINT: stopping', 0));
  process.on('SIGTERM', () => void stop('SIGTERM: stopping', 0));
}

/**
 * Says "ready" once, when the gateway's /ready is 200 with every model served (none still loading):
 * the moment requests for any of them stop getting 503.
 */
async function announceReady(models: string[], stopped: () => boolean): Promise<void> {
  const gateway = loadGatewayConfig();
  const host = ['0.0.0.0', '::'].includes(gateway.HOST) ? '127.0.0.1' : gateway.HOST;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${gateway.PORT}`;
  while (!stopped()) {
    try {
      const res = await fetch(`${url}${gateway.ROOT_PATH ?? ''}/ready`);
      const body = (await res.json()) as { models?: Record<string, { workers?: number }> };
      if (res.ok && models.every((m) => (body.models?.[m]?.workers ?? 0) > 0)) {
        log(`ready: ${models.join(', ')} served at ${url}`);
        return;
      }
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

main().catch((err) => {
  log(err instanceof ConfigError || err instanceof RedisUnavailable ? err.message : `failed: ${String(err)}`);
  process.exit(1);
});
