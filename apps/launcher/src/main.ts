#!/usr/bin/env node
import { fileURLToPath } from 'node:url';
import { ConfigError, formatHelp, loadLauncherConfig } from '@tserve/config';
import { ensureRedis, RedisUnavailable } from './redis.js';
import { Supervisor } from './supervisor.js';

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(
    formatHelp(
      'npm start: runs the whole system locally: Redis (when none answers), the gateway and WORKERS workers per model.\n\nUsage: [MODEL=a,b] [WORKERS=N] [MODEL_DIR=../shared/models] npm start',
      ['launcher', 'gateway', 'worker', 'common'],
    ),
  );
  process.exit(0);
}

const log = (msg: string) => process.stderr.write(`[launcher] ${msg}\n`);
const script = (app: string) => fileURLToPath(new URL(`../../${app}/dist/main.js`, import.meta.url));

async function main(): Promise<void> {
  const config = loadLauncherConfig();
  const redis = await ensureRedis(config.REDIS_URL, config.REDIS_SERVER_BIN, log);
  let stopping = false;
  const stop = async (why: string, code: number) => {
    if (stopping) return;
    stopping = true;
    log(why);
    await supervisor.stopAll();
    redis?.kill('SIGTERM');
    process.exit(code);
  };
  const supervisor = new Supervisor(log, (reason) => void stop(`${reason}; stopping everything`, 1));
  const env = { ...process.env, REDIS_URL: config.REDIS_URL };

  supervisor.start({ name: 'gateway', script: script('gateway'), env: { ...env, DEFAULT_MODEL: process.env.DEFAULT_MODEL ?? config.models[0] }, essential: true });
  for (const model of config.models) {
    for (let i = 0; i < config.WORKERS; i++) {
      // Everything runs on this host: the model yields to the gateway, so 503s and /health stay fast under load.
      supervisor.start({ name: `worker ${model} #${i + 1}`, script: script('worker'), env: { WORKER_NICE: '10', ...env, MODEL: model }, essential: false });
    }
  }
  log(`started gateway and ${config.WORKERS} worker(s) for ${config.models.join(', ')}; Ctrl-C stops everything`);

  process.on('SIGINT', () => void stop('SIGINT: stopping', 0));
  process.on('SIGTERM', () => void stop('SIGTERM: stopping', 0));
}

main().catch((err) => {
  log(err instanceof ConfigError || err instanceof RedisUnavailable ? err.message : `failed: ${String(err)}`);
  process.exit(1);
});
