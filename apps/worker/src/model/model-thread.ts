import { Worker } from 'node:worker_threads';
import type { WorkerConfig } from '@tserve/config';
import type { Task } from '@tserve/contract';
import { ModelLoadError, type SessionFile } from './model.js';
import type { SessionNames, ThreadMessage } from './model-thread-protocol.js';

/**
 * Starts the model thread and waits until its session is loaded from `file` in the model's folder
 * `dir`; the Engine then makes the model calls on it (engine.ts). A thread that dies later takes the
 * session with it (out of memory, a native crash): nothing can run, and `onDeath` is told why.
 * Answers the thread and its session's input and output names.
 */
export async function startModelThread(
  config: WorkerConfig,
  task: Task,
  dir: string,
  file: SessionFile,
  onDeath: (reason: string) => void,
): Promise<{ thread: Worker; names: SessionNames }> {
  const thread = new Worker(new URL('./model-thread-main.js', import.meta.url), {
    workerData: { config, task, dir, file },
  });
  const names = await new Promise<SessionNames>((resolve, reject) => {
    const onMessage = (message: ThreadMessage) => {
      if (message.kind === 'ready') resolve(message.names);
      else if (message.kind === 'load-failed') reject(new ModelLoadError(message.message));
    };
    thread.on('message', onMessage);
    thread.once('error', (err) => reject(new ModelLoadError(`model thread failed while loading: ${err.message}`)));
  });
  thread.removeAllListeners('message');
  thread.removeAllListeners('error');
  thread.on('error', (err) => onDeath(`model thread failed: ${err.message}`));
  thread.on('exit', (code) => onDeath(`model thread exited with code ${code}`));
  return { thread, names };
}

/** Ends the model thread, which is then no death. */
export async function stopModelThread(thread: Worker): Promise<void> {
  thread.removeAllListeners('exit');
  await thread.terminate();
}
