/** What a sequence puts in a call's tensors (engine.ts's Encoded). */
interface Sequence {
  ids: number[];
  typeIds?: number[];
}

/** What a call's per-token outputs are (engine.ts's BatchOutput). */
interface Output {
  data: Float32Array;
  dims: number[];
  endLogits?: Float32Array;
}

/** One model call's input tensors, [rows, width] each, padded on one side to the batch's longest sequence. */
export interface BatchTensors {
  rows: number;
  width: number;
  inputIds: BigInt64Array;
  attention: BigInt64Array;
  tokenTypes: BigInt64Array;
  /** Each token's position, counted over the real tokens from 0 wherever the padding is; 1 on padding, as transformers makes them. */
  positions: BigInt64Array;
}

/**
 * A batch's tensors, built here rather than by the tokenizer so that a batch pads only to its own
 * longest sequence, on the tokenizer's side: a decoder embedder's tokenizer pads on the left, so
 * that its last token is every row's last.
 */
export function batchTensors(batch: Sequence[], padId: number, side: 'left' | 'right'): BatchTensors {
  const rows = batch.length;
  const width = Math.max(...batch.map((e) => e.ids.length));
  const inputIds = new BigInt64Array(rows * width).fill(BigInt(padId));
  const attention = new BigInt64Array(rows * width);
  const tokenTypes = new BigInt64Array(rows * width);
  const positions = new BigInt64Array(rows * width).fill(1n);
  batch.forEach((e, r) => {
    const start = r * width + (side === 'left' ? width - e.ids.length : 0);
    for (let i = 0; i < e.ids.length; i++) {
      inputIds[start + i] = BigInt(e.ids[i]);
      attention[start + i] = 1n;
      positions[start + i] = BigInt(i);
      if (e.typeIds) tokenTypes[start + i] = BigInt(e.typeIds[i]);
    }
  });
  return { rows, width, inputIds, attention, tokenTypes, positions };
}

/**
 * A left-padded batch's per-token outputs with each row's tokens moved to its start, where right
 * padding leaves them: every head reads token t of a sequence at t.
 */
export function leftAligned<O extends Output>(output: O, batch: Sequence[]): O {
  // Token outputs: [rows, length, width], or question answering's logits, [rows, length] each.
  const perToken = output.dims.length >= 3 || output.endLogits !== undefined;
  if (!perToken) return output;
  const [, length] = output.dims;
  const size = output.dims.slice(2).reduce((n, d) => n * d, 1);
  const move = (data: Float32Array) => {
    batch.forEach((e, r) => {
      const pad = length - e.ids.length;
      if (pad > 0) data.copyWithin(r * length * size, (r * length + pad) * size, (r + 1) * length * size);
    });
    return data;
  };
  return {
    ...output,
    data: move(output.data),
    ...(output.endLogits ? { endLogits: move(output.endLogits) } : {}),
  };
}
