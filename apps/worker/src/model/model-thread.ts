import { Worker } from 'node:worker_threads';
import type { WorkerConfig } from '@tserve/config';
import type { Task } from '@tserve/contract';
import { ModelLoadError, type SessionFile } from './model.js';
import type { ForwardRequest, ThreadMessage } from './model-thread-protocol.js';

export interface BatchOutput {
  data: Float32Array;
  dims: number[];
  /** Question answering's second output, shaped like `data` (which then holds the start logits). */
  endLogits?: Float32Array;
}

/** The main thread's handle on the model thread: one model call at a time, answered in order. */
export class ModelThread {
  private nextId = 0;
  private readonly pending = new Map<number, { resolve: (o: BatchOutput) => void; reject: (e: Error) => void }>();

  private constructor(private readonly thread: Worker) {}

  /** Starts the thread and waits until its session is loaded from `file` in the model's folder `dir`. */
  static async start(
    config: WorkerConfig,
    task: Task,
    dir: string,
    file: SessionFile,
    onDeath: (reason: string) => void,
  ): Promise<ModelThread> {
    const thread = new Worker(new URL('./model-thread-main.js', import.meta.url), {
      workerData: { config, task, dir, file },
    });
    const handle = new ModelThread(thread);
    await new Promise<void>((resolve, reject) => {
      const onMessage = (message: ThreadMessage) => {
        if (message.kind === 'ready') resolve();
        else if (message.kind === 'load-failed') reject(new ModelLoadError(message.message));
      };
      thread.on('message', onMessage);
      thread.once('error', (err) => reject(new ModelLoadError(`model thread failed while loading: ${err.message}`)));
    });
    thread.on('message', (message: ThreadMessage) => handle.onMessage(message));
    // A thread that dies takes the session with it (out of memory, a native crash): nothing can run.
    thread.on('error', (err) => handle.die(`model thread failed: ${err.message}`, onDeath));
    thread.on('exit', (code) => handle.die(`model thread exited with code ${code}`, onDeath));
    return handle;
  }

  forward(
    rows: number,
    width: number,
    inputIds: BigInt64Array,
    attention: BigInt64Array,
    tokenTypes: BigInt64Array,
  ): Promise<BatchOutput> {
    const id = this.nextId++;
    const request: ForwardRequest = { id, rows, width, inputIds, attention, tokenTypes };
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.thread.postMessage(request, [
        inputIds.buffer as ArrayBuffer,
        attention.buffer as ArrayBuffer,
        tokenTypes.buffer as ArrayBuffer,
      ]);
    });
  }

  async stop(): Promise<void> {
    this.thread.removeAllListeners('exit');
    await this.thread.terminate();
  }

  private onMessage(message: ThreadMessage): void {
    if (message.kind !== 'output' && message.kind !== 'failed') return;
    const waiter = this.pending.get(message.id);
    this.pending.delete(message.id);
    if (message.kind === 'output')
      waiter?.resolve({ data: message.data, dims: message.dims, endLogits: message.endLogits });
    else waiter?.reject(new Error(message.message));
  }

  private die(reason: string, onDeath: (reason: string) => void): void {
    for (const waiter of this.pending.values()) waiter.reject(new Error(reason));
    this.pending.clear();
    onDeath(reason);
  }
}
