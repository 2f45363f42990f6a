/** Messages between the worker's main thread and its model thread. */

export interface ForwardRequest {
  id: number;
  rows: number;
  width: number;
  inputIds: BigInt64Array;
  attention: BigInt64Array;
  tokenTypes: BigInt64Array;
}

export type ThreadMessage =
  | { kind: 'ready' }
  | { kind: 'load-failed'; message: string }
  | { kind: 'output'; id: number; data: Float32Array; dims: number[]; endLogits?: Float32Array }
  | { kind: 'failed'; id: number; message: string };
