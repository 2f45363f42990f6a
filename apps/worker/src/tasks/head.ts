import type { TaskParameters } from '@tserve/contract';
import type { BatchOutput, Encoded } from '../engine.js';

/** Turns one row of a batched model output into the client's answer for that input. */
export interface TaskHead<P extends TaskParameters = TaskParameters> {
  /** Rejects an input before it is batched (throws ApiError), so a bad input never reaches the model. */
  check?(encoded: Encoded, parameters: P): void;
  decode(output: BatchOutput, row: number, encoded: Encoded, parameters: P): unknown;
}
