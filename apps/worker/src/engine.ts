import type { Tensor } from '@huggingface/transformers';
import type { LoadedModel } from './model.js';
import type { BatchOutput, ModelThread } from './model-thread-client.js';

export type { BatchOutput } from './model-thread-client.js';

/** One input after tokenization: what the batch planner and the task heads work from. */
export interface Encoded {
  text: string;
  ids: number[];
  /** Token count before truncation, when the text was cut. */
  truncatedFrom?: number;
}

/**
 * Tokenizes inputs one by one (their lengths drive batching) and runs padded batches on the model
 * thread. Tensors are built here rather than by the tokenizer so a batch pads only to its own
 * longest input. The model's main output comes back as [batch, classes] or [batch, length, width].
 */
export class Engine {
  private readonly padId: number;

  constructor(
    readonly loaded: LoadedModel,
    private readonly thread: ModelThread,
  ) {
    this.padId = loaded.tokenizer.pad_token_id ?? 0;
  }

  encode(text: string, truncation: boolean): Encoded {
    const { tokenizer, maxLength } = this.loaded;
    const ids = tokenizer.encode(text);
    if (!truncation || ids.length <= maxLength) return { text, ids };
    const cut = tokenizer(text, { truncation: true, max_length: maxLength }).input_ids as Tensor;
    return { text, ids: Array.from(cut.data as BigInt64Array, Number), truncatedFrom: ids.length };
  }

  async forward(batch: Encoded[]): Promise<BatchOutput> {
    const rows = batch.length;
    const width = Math.max(...batch.map((e) => e.ids.length));
    const inputIds = new BigInt64Array(rows * width).fill(BigInt(this.padId));
    const attention = new BigInt64Array(rows * width);
    batch.forEach((e, r) => {
      for (let i = 0; i < e.ids.length; i++) {
        inputIds[r * width + i] = BigInt(e.ids[i]);
        attention[r * width + i] = 1n;
      }
    });
    return this.thread.forward(rows, width, inputIds, attention);
  }
}
