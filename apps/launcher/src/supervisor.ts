import { spawn, type ChildProcess } from 'node:child_process';

export interface ProcessSpec {
  name: string;
  script: string;
  env: NodeJS.ProcessEnv;
  /** Restart after an unexpected exit (workers); a crash during start-up is not retried. */
  restart: boolean;
}

/** A process that failed this soon after starting is broken (bad model, bad config), not unlucky. */
const STARTUP_MS = 15_000;

/** Runs the system's processes, restarts workers that die, and stops them all on request. */
export class Supervisor {
  private readonly children = new Map<string, ChildProcess>();
  private stopping = false;

  constructor(private readonly log: (msg: string) => void) {}

  start(spec: ProcessSpec): void {
    const startedAt = Date.now();
    const child = spawn(process.execPath, [spec.script], { env: spec.env, stdio: ['ignore', 'inherit', 'inherit'] });
    this.children.set(spec.name, child);
    child.on('exit', (code, signal) => {
      this.children.delete(spec.name);
      if (this.stopping) return;
      const early = Date.now() - startedAt < STARTUP_MS;
      this.log(`${spec.name} exited (${signal ?? `code ${code}`})`);
      if (spec.restart && !(early && code !== 0 && code !== null)) {
        this.log(`restarting ${spec.name}`);
        setTimeout(() => !this.stopping && this.start(spec), 500);
      } else if (spec.restart) {
        this.log(`${spec.name} failed while starting; not restarting it (see its message above)`);
      }
    });
  }

  get running(): number {
    return this.children.size;
  }

  async stopAll(timeoutMs = 15_000): Promise<void> {
    this.stopping = true;
    const exits = [...this.children.values()].map(
      (child) => new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), timeoutMs).unref();
      }),
    );
    await Promise.all(exits);
  }
}
