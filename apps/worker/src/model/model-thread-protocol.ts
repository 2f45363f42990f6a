/** Messages between the worker's main thread and its model thread. */

export interface ForwardRequest {
  id: number;
  rows: number;
  width: number;
  inputIds: BigInt64Array;
  attention: BigInt64Array;
  tokenTypes: BigInt64Array;
  /** Each token's position, counted over the real tokens from 0 (1 on padding, as transformers makes them); fed where the export takes it. */
  positions: BigInt64Array;
}

/** A session's inputs and outputs, by name, as its ONNX file declares them. */
export interface SessionNames {
  inputs: string[];
  outputs: string[];
}

export type ThreadMessage =
  | { kind: 'ready'; names: SessionNames }
  | { kind: 'load-failed'; message: string }
  | {
      kind: 'output';
      id: number;
      data: Float32Array;
      dims: number[];
      endLogits?: Float32Array;
      /** A sentence-transformers export's own embedding ([rows, width]): pooling and head run inside the graph. */
      sentence?: { data: Float32Array; dims: number[] };
    }
  | { kind: 'failed'; id: number; message: string };
