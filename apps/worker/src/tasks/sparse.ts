import type { SparseParameters } from '@tserve/contract';
import type { LoadedModel } from '../model/model.js';
import type { Splade } from '../model/sentence-transformers.js';
import type { TaskHead } from './head.js';
import { encodePrompted } from './prompts.js';

/** One vocabulary entry of a sparse vector, as TEI's /embed_sparse gives it. */
interface SparseValue {
  index: number;
  value: number;
}

/**
 * Sparse vectors from a masked-LM head (SPLADE): per vocabulary entry, log(1 + activation(logit))
 * pooled (max or sum) over the input's tokens, padding left out; the zeros are dropped.
 */
export function sparseHead(loaded: LoadedModel, splade: Splade): TaskHead<SparseParameters, string> {
  return {
    encode: (input, parameters, engine) => encodePrompted(loaded, input, parameters, engine),
    decode(output, index, encoded): SparseValue[] {
      const [, length, vocab] = output.dims;
      const pooled = new Float64Array(vocab);
      for (let t = 0; t < encoded.ids.length; t++) {
        const logits = output.data.subarray((index * length + t) * vocab, (index * length + t + 1) * vocab);
        for (let j = 0; j < vocab; j++) {
          if (!(logits[j] > 0)) continue;
          const value = splade.activation === 'log1p_relu' ? Math.log1p(Math.log1p(logits[j])) : Math.log1p(logits[j]);
          pooled[j] = splade.strategy === 'max' ? Math.max(pooled[j], value) : pooled[j] + value;
        }
      }
      const values: SparseValue[] = [];
      for (let j = 0; j < vocab; j++) if (pooled[j] > 0) values.push({ index: j, value: pooled[j] });
      return values;
    },
  };
}
