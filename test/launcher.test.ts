/**
 * Issue 2, running it: `npm start` (the launcher) brings up Redis when none answers, the gateway and
 * WORKERS workers per model, answers the README's curl, and stops everything on Ctrl-C, and on
 * SIGTERM or SIGINT sent to npm alone, as a process manager or a script sends them.
 * Also: /ready says 503 until a worker is up.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import os from 'node:os';
import type { ReadyBody } from '@tserve/contract';
import {
  MODEL_DIR,
  Proc,
  REDIS_URL,
  ROOT,
  TestSystem,
  cleanPrefix,
  freePort,
  uniquePrefix,
  waitFor,
} from './helpers/system.ts';
import { CLASSIFIER, NER } from './helpers/replicas.ts';

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Pids whose environment holds `entry` (e.g. a system's unique QUEUE_PREFIX), from /proc. */
async function processesWithEnv(entry: string): Promise<number[]> {
  const { readFile, readdir } = await import('node:fs/promises');
  const pids: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if ((await readFile(`/proc/${name}/environ`, 'utf8')).split('\0').includes(entry)) pids.push(Number(name));
    } catch {
      // the process ended while we looked
    }
  }
  return pids;
}

/** Child pids of a process, from /proc (the launcher's gateway, workers and Redis). */
async function childrenOf(pid: number): Promise<number[]> {
  const { readFile, readdir } = await import('node:fs/promises');
  const pids: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = await readFile(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) pids.push(Number(entry));
    } catch {
      // the process ended while we looked
    }
  }
  return pids;
}

/** A process's environment, from /proc. */
async function environOf(pid: number): Promise<string[]> {
  const { readFile } = await import('node:fs/promises');
  return (await readFile(`/proc/${pid}/environ`, 'utf8')).split('\0');
}

/** The launcher's children that run `app` (gateway, worker), by their command lines. */
async function childrenRunning(launcherPid: number, app: string): Promise<number[]> {
  const { readFile } = await import('node:fs/promises');
  const pids: number[] = [];
  for (const pid of await childrenOf(launcherPid)) {
    if ((await readFile(`/proc/${pid}/cmdline`, 'utf8')).includes(`${app}/dist/main.js`)) pids.push(pid);
  }
  return pids;
}

/**
 * Kills a launcher and what it started. Killed alone, its gateway, workers and Redis would outlive
 * it, holding its output pipes open: a failed assertion would then hang the suite, not fail it.
 */
async function killLauncher(launcher: Proc): Promise<void> {
  for (const pid of await childrenOf(launcher.pid)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  await launcher.stop('SIGKILL');
}

/** A process as /proc shows it; its start time tells it from a later process given the same pid. */
interface ProcessInfo {
  pid: number;
  startTime: string;
  cmdline: string;
}

async function processInfo(pid: number): Promise<(ProcessInfo & { state: string }) | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const cmdline = (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0').join(' ').trim();
    return { pid, state: fields[0], startTime: fields[19], cmdline };
  } catch {
    return undefined; // gone
  }
}

/** `root` and every process below it, from /proc. */
async function processTree(root: number): Promise<ProcessInfo[]> {
  const tree: ProcessInfo[] = [];
  for (let pending = [root]; pending.length > 0;) {
    const pid = pending.pop()!;
    const info = await processInfo(pid);
    if (info) tree.push(info);
    pending.push(...(await childrenOf(pid)));
  }
  return tree;
}

/** Still running: the same process (not a later one given its pid) and not a zombie waiting to be reaped. */
async function stillRunning(proc: ProcessInfo): Promise<boolean> {
  const now = await processInfo(proc.pid);
  return now !== undefined && now.startTime === proc.startTime && now.state !== 'Z';
}

/** Whether something accepts connections on 127.0.0.1:`port`. */
async function listening(port: number): Promise<boolean> {
  const socket = net.connect(port, '127.0.0.1');
  try {
    await once(socket, 'connect');
    return true;
  } catch {
    return false;
  } finally {
    socket.destroy();
  }
}

/** Resolves when `proc` has printed something matching `pattern`; rejects if it exits first or `timeoutMs` passes. */
function untilOutput(proc: Proc, pattern: RegExp, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => done(new Error(`timed out waiting for ${pattern}:\n${proc.output}`)), timeoutMs);
    const check = () => pattern.test(proc.output) && done();
    const exited = (code: number | null) =>
      done(new Error(`exited (${code}) before printing ${pattern}:\n${proc.output}`));
    function done(err?: Error) {
      clearTimeout(timer);
      proc.child.stdout?.off('data', check);
      proc.child.stderr?.off('data', check);
      proc.child.off('exit', exited);
      if (err) reject(err);
      else resolve();
    }
    proc.child.stdout?.on('data', check);
    proc.child.stderr?.on('data', check);
    proc.child.on('exit', exited);
    check();
  });
}

/** Resolves with `promise`'s value, or rejects saying what did not happen within `timeoutMs`. */
async function within<T>(what: string, promise: Promise<T>, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * What a process manager (systemd, a container's init, a script) does: start `npm start`, then send
 * `signal` to the pid it started, which is npm's, not the launcher's, and count the system stopped
 * once that pid has exited. Every process below npm (the launcher, its Redis, gateway and worker)
 * must then be gone and their ports closed.
 */
async function npmStartStopsEverythingOn(signal: NodeJS.Signals, cleanups: Array<() => Promise<void>>): Promise<void> {
  const port = await freePort();
  const redisPort = await freePort();
  const npm = new Proc(
    'npm start',
    spawn('npm', ['start'], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        MODEL_DIR,
        MODEL: CLASSIFIER,
        PORT: String(port),
        GRPC_PORT: String(await freePort()),
        REDIS_URL: `redis://127.0.0.1:${redisPort}`,
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
  );
  // Whatever the test saw of the tree, and whatever is below npm now: all of it goes, even on a failure.
  let seen: ProcessInfo[] = [];
  cleanups.push(async () => {
    for (const proc of [...seen, ...(await processTree(npm.pid))].reverse()) {
      try {
        if (proc.pid !== npm.pid && (await stillRunning(proc))) process.kill(proc.pid, 'SIGKILL');
      } catch {
        // it ended meanwhile
      }
    }
    await npm.stop('SIGKILL', 0);
  });

  // Said once /ready is 200 with the model served (before that, npm runs the build first).
  await untilOutput(npm, /\[launcher\] ready: /, 120_000);
  seen = await processTree(npm.pid);
  for (const part of [
    'launcher/dist/main.js',
    'gateway/dist/main.js',
    'worker/dist/main.js',
    `redis-server 127.0.0.1:${redisPort}`,
  ]) {
    assert.ok(
      seen.some((p) => p.cmdline.includes(part)),
      `${part} runs below npm:\n${seen.map((p) => `${p.pid} ${p.cmdline}`).join('\n')}`,
    );
  }
  assert.ok((await listening(port)) && (await listening(redisPort)), 'the gateway and Redis listen');

  process.kill(npm.pid, signal);
  // The launcher gives each process up to 15 s to stop before it kills it.
  const code = await within(`npm start to exit on ${signal}`, npm.exited, 30_000).catch(async (err: Error) => {
    const left = (
      await Promise.all(seen.map(async (p) => ((await stillRunning(p)) ? `${p.pid} ${p.cmdline}` : '')))
    ).filter(Boolean);
    throw new Error(`${err.message}; still running:\n${left.join('\n')}\n${npm.output}`);
  });
  // npm has exited: a supervisor now counts the system stopped (and may start it again at once), so
  // nothing of it may be left, not even a Redis still shutting down on its port.
  const left: string[] = [];
  for (const proc of seen) if (await stillRunning(proc)) left.push(`${proc.pid} ${proc.cmdline}`);
  assert.deepEqual(
    left,
    [],
    `npm start exited (${code}, ${npm.child.signalCode}) with these still running\n${npm.output}`,
  );
  assert.equal(await listening(port), false, 'the gateway port is closed');
  assert.equal(await listening(redisPort), false, 'the Redis port is closed');
  assert.match(npm.output, new RegExp(`\\[launcher\\] ${signal}: stopping`));
  assert.equal(code, 0, `the launcher stopped cleanly and npm says so:\n${npm.output}`);
}

describe('npm start (launcher)', () => {
  const cleanups: Array<() => Promise<void>> = [];
  after(async () => {
    for (const c of cleanups) await c();
  });

  it('starts Redis when none answers, serves the README curl for the first model, and Ctrl-C stops everything', async () => {
    const port = await freePort();
    const redisPort = await freePort();
    const launcher = new Proc(
      'launcher',
      spawn(process.execPath, [path.join(ROOT, 'apps/launcher/dist/main.js')], {
        env: {
          PATH: process.env.PATH,
          HOME: process.env.HOME,
          MODEL_DIR,
          MODEL: `${CLASSIFIER},${NER}`,
          WORKERS: '2',
          PORT: String(port),
          GRPC_PORT: String(await freePort()),
          REDIS_URL: `redis://127.0.0.1:${redisPort}`,
          LOG_LEVEL: 'warn',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    );
    cleanups.push(() => killLauncher(launcher));
    const url = `http://127.0.0.1:${port}`;
    await waitFor(
      'the system to be ready',
      async () => (await fetch(`${url}/ready`)).status === 200,
      60_000,
      250,
    ).catch((err) => {
      throw new Error(`${err}\n${launcher.output}`);
    });
    assert.match(launcher.output, new RegExp(`starting redis-server on port ${redisPort}`));

    const ready = (await (await fetch(`${url}/ready`)).json()) as ReadyBody;
    await waitFor(
      'two workers per model',
      async () => {
        const body = (await (await fetch(`${url}/ready`)).json()) as ReadyBody;
        return body.models[CLASSIFIER]?.workers === 2 && body.models[NER]?.workers === 2;
      },
      60_000,
    );
    assert.ok(ready.models[CLASSIFIER]);
    await waitFor(
      'the launcher to say ready',
      async () =>
        /ready: replica\/tiny-bert-sst2, replica\/tiny-bert-ner served at http:\/\/127\.0\.0\.1:/.test(launcher.output),
      10_000,
    );

    // The README's example, as curl sends it (form-encoded).
    const res = await fetch(`${url}/`, {
      method: 'POST',
      body: 'This restaurant is awesome',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    assert.equal(res.status, 200);
    const body = (await res.json()) as Array<{ label: string; score: number }>;
    assert.ok(['POSITIVE', 'NEGATIVE'].includes(body[0].label), 'the first MODEL serves POST /');
    const ner = await fetch(`${url}/models/replica/tiny-bert-ner`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ inputs: 'My name is Sarah' }),
    });
    assert.equal(ner.status, 200);

    const children = await childrenOf(launcher.pid);
    assert.equal(children.length, 1 + 4 + 1, `gateway, four workers and redis-server: ${children.join(',')}`);
    // Co-located workers yield to the gateway; four of them on one host must not spin against each other.
    const workers = await childrenRunning(launcher.pid, 'worker');
    assert.equal(workers.length, 4);
    for (const worker of workers) {
      const env = await environOf(worker);
      assert.ok(env.includes('WORKER_NICE=19'), `worker ${worker} runs at niceness 19`);
      assert.ok(
        !env.some((e) => e.startsWith('INTRA_OP_SPINNING=')),
        `worker ${worker} keeps the default, no spinning`,
      );
    }
    launcher.kill('SIGINT');
    assert.equal(await launcher.exited, 0, launcher.output);
    await waitFor('every child to exit', async () => children.every((pid) => !alive(pid)), 15_000);
  });

  it('SIGTERM to the pid `npm start` started (what a process manager sends) stops every process of the system', async () => {
    await npmStartStopsEverythingOn('SIGTERM', cleanups);
  });

  it('SIGINT to the pid `npm start` started (a script, not a terminal) stops every process of the system', async () => {
    await npmStartStopsEverythingOn('SIGINT', cleanups);
  });

  it('restarts a gateway that crashed, and stops everything with exit 1 when the gateway cannot start', async () => {
    const grpcPort = await freePort();
    const start = (port: number, prefix: string) =>
      new Proc(
        'launcher',
        spawn(process.execPath, [path.join(ROOT, 'apps/launcher/dist/main.js')], {
          env: {
            PATH: process.env.PATH,
            HOME: process.env.HOME,
            MODEL_DIR,
            MODEL: CLASSIFIER,
            PORT: String(port),
            GRPC_PORT: String(grpcPort),
            REDIS_URL: REDIS_URL,
            QUEUE_PREFIX: prefix,
            LOG_LEVEL: 'warn',
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        }),
      );
    const port = await freePort();
    const prefix = uniquePrefix('supervise');
    const launcher = start(port, prefix);
    // Launchers on the shared Redis leave their systems' keys (workers, load times): removed once they stop.
    cleanups.push(
      () => killLauncher(launcher),
      () => cleanPrefix(REDIS_URL, prefix),
    );
    const url = `http://127.0.0.1:${port}`;
    await waitFor('the system to be ready', async () => (await fetch(`${url}/ready`)).status === 200, 60_000, 250);
    // A lone worker, niced below the gateway, runs a thread per core and does not spin.
    const [worker] = await childrenRunning(launcher.pid, 'worker');
    const workerEnv = await environOf(worker);
    const threads = os.availableParallelism();
    assert.ok(
      workerEnv.includes('WORKER_NICE=19') &&
        workerEnv.includes(`INTRA_OP_THREADS=${threads}`) &&
        !workerEnv.some((e) => e.startsWith('INTRA_OP_SPINNING=')),
      workerEnv.filter((e) => /NICE|SPIN|INTRA_OP/.test(e)).join(' '),
    );
    const gatewayPid = async (): Promise<number | undefined> => (await childrenRunning(launcher.pid, 'gateway'))[0];
    const crashed = (await gatewayPid())!;
    process.kill(crashed, 'SIGKILL');
    await waitFor(
      'a new gateway answering',
      async () => {
        const pid = await gatewayPid();
        return (
          pid !== undefined &&
          pid !== crashed &&
          (await fetch(`${url}/health`).then(
            (r) => r.ok,
            () => false,
          ))
        );
      },
      30_000,
      100,
    );
    assert.match(launcher.output, /gateway exited \(SIGKILL\)/);
    assert.match(launcher.output, /restarting gateway/);

    // A second launcher on the same port: its gateway cannot listen, so nothing of it may stay up.
    const blockedPrefix = uniquePrefix('blocked');
    const blocked = start(port, blockedPrefix);
    cleanups.push(() => cleanPrefix(REDIS_URL, blockedPrefix));
    const code = await blocked.exited;
    assert.equal(code, 1, blocked.output);
    assert.match(blocked.output, new RegExp(`port ${port} on 0\\.0\\.0\\.0 is already in use`));
    assert.match(blocked.output, /gateway failed while starting .*; stopping everything/);
    // Its worker had been started too: no process of that launcher's system may survive it.
    assert.deepEqual(
      await processesWithEnv(`QUEUE_PREFIX=${blockedPrefix}`),
      [],
      'no process of the stopped system left running',
    );
    launcher.kill('SIGINT');
    assert.equal(await launcher.exited, 0, launcher.output);
  });

  it('stops with a clear message when no Redis answers and none can be started', async () => {
    const launcher = new Proc(
      'launcher',
      spawn(process.execPath, [path.join(ROOT, 'apps/launcher/dist/main.js')], {
        env: { PATH: '/nonexistent', HOME: process.env.HOME, REDIS_URL: `redis://127.0.0.1:${await freePort()}` },
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    );
    assert.equal(await launcher.exited, 1);
    assert.match(launcher.output, /nothing answers at REDIS_URL/);
    assert.match(launcher.output, /apt-get install redis-server|point REDIS_URL/);
  });

  it('/ready is 503 before a worker is up and 200 after', async () => {
    const system = new TestSystem(uniquePrefix('ready'));
    cleanups.push(() => system.stop());
    await system.startGateway();
    const before = await fetch(`${system.url}/ready`);
    assert.equal(before.status, 503);
    assert.match(JSON.stringify(await before.json()), /no live worker/);
    system.startWorker({ model: CLASSIFIER });
    await waitFor('/ready 200', async () => (await fetch(`${system.url}/ready`)).status === 200, 30_000);
  });

  it('--help prints the settings of each program', async () => {
    for (const app of ['gateway', 'worker', 'launcher']) {
      const proc = new Proc(
        app,
        spawn(process.execPath, [path.join(ROOT, `apps/${app}/dist/main.js`), '--help'], {
          stdio: ['ignore', 'pipe', 'pipe'],
        }),
      );
      assert.equal(await proc.exited, 0);
      assert.match(proc.output, /REDIS_URL/);
    }
  });
});
