import { spawn, type ChildProcess } from 'node:child_process';

export interface ProcessSpec {
  name: string;
  script: string;
  env: NodeJS.ProcessEnv;
  /**
   * Without this process the system is not a system (the gateway): if it cannot be kept running,
   * the supervisor gives up on everything rather than leave half a system up.
   */
  essential: boolean;
}

/** A process that failed this soon after starting is broken (bad model, bad config, busy port), not unlucky. */
const STARTUP_MS = 15_000;
/** More crashes than this within CRASH_WINDOW_MS is a crash loop: restarting again would not help. */
const MAX_CRASHES = 5;
const CRASH_WINDOW_MS = 60_000;
const RESTART_DELAY_MS = 500;

/**
 * Runs the system's processes and restarts the ones that die. A worker that fails while starting is
 * left down (the gateway reports its model's load failure); an essential process that fails while
 * starting, or crash-loops, makes the supervisor stop everything and call `onGiveUp`.
 */
export class Supervisor {
  private readonly children = new Map<string, ChildProcess>();
  private readonly crashes = new Map<string, number[]>();
  private stopping = false;

  constructor(
    private readonly log: (msg: string) => void,
    private readonly onGiveUp: (reason: string) => void,
  ) {}

  start(spec: ProcessSpec): void {
    if (this.stopping) return;
    const startedAt = Date.now();
    const child = spawn(process.execPath, [spec.script], { env: spec.env, stdio: ['ignore', 'inherit', 'inherit'] });
    this.children.set(spec.name, child);
    child.on('exit', (code, signal) => {
      this.children.delete(spec.name);
      if (this.stopping) return;
      this.log(`${spec.name} exited (${signal ?? `code ${code}`})`);
      const failedStarting = Date.now() - startedAt < STARTUP_MS && code !== 0 && code !== null;
      if (failedStarting) {
        if (spec.essential) this.onGiveUp(`${spec.name} failed while starting (see its message above)`);
        else this.log(`${spec.name} failed while starting; not restarting it (see its message above)`);
        return;
      }
      const now = Date.now();
      const recent = (this.crashes.get(spec.name) ?? []).filter((t) => now - t < CRASH_WINDOW_MS);
      recent.push(now);
      this.crashes.set(spec.name, recent);
      if (recent.length > MAX_CRASHES) {
        const reason = `${spec.name} exited ${recent.length} times within ${CRASH_WINDOW_MS / 1000} s`;
        if (spec.essential) this.onGiveUp(reason);
        else this.log(`${reason}; not restarting it`);
        return;
      }
      this.log(`restarting ${spec.name}`);
      setTimeout(() => this.start(spec), RESTART_DELAY_MS);
    });
  }

  async stopAll(timeoutMs = 15_000): Promise<void> {
    this.stopping = true;
    const exits = [...this.children.values()].map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGTERM');
          setTimeout(() => child.kill('SIGKILL'), timeoutMs).unref();
        }),
    );
    await Promise.all(exits);
  }
}
