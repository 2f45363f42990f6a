import type { FeatureExtractionParameters } from '@tserve/contract';
import type { LoadedModel } from '../model/model.js';
import type { TaskHead } from './head.js';
import { encodePrompted } from './prompts.js';

function normalized(vector: Float64Array): Float64Array {
  let norm = 0;
  for (const v of vector) norm += v * v;
  norm = Math.sqrt(norm) || 1;
  return vector.map((v) => v / norm);
}

/** Sentence embeddings: mean pooling over real tokens and L2 normalisation, as sentence-transformers do. */
export function featureExtractionHead(loaded: LoadedModel): TaskHead<FeatureExtractionParameters, string> {
  // The width of a token's vector, as the config names it; a config that names none is taken as wide.
  const width =
    [loaded.config.hidden_size, loaded.config.dim, loaded.config.d_model].find(
      (w): w is number => typeof w === 'number',
    ) ?? 4096;
  return {
    encode: (input, parameters, engine) => encodePrompted(loaded, input, parameters, engine),
    answerValues(encoded, parameters) {
      return (parameters.pooling === 'none' ? encoded.ids.length : 1) * width;
    },
    decode(output, index, encoded, parameters) {
      const [, length, width] = output.dims;
      const tokens = encoded.ids.length;
      const at = (t: number) => output.data.subarray((index * length + t) * width, (index * length + t + 1) * width);
      const pooling = parameters.pooling ?? 'mean';
      if (pooling === 'none') {
        return Array.from({ length: tokens }, (_, t) => {
          const v = Float64Array.from(at(t));
          return Array.from(parameters.normalize ? normalized(v) : v);
        });
      }
      let pooled: Float64Array;
      if (pooling === 'cls') pooled = Float64Array.from(at(0));
      else {
        pooled = new Float64Array(width);
        for (let t = 0; t < tokens; t++) {
          const v = at(t);
          for (let j = 0; j < width; j++) pooled[j] += v[j];
        }
        for (let j = 0; j < width; j++) pooled[j] /= tokens;
      }
      return Array.from(parameters.normalize === false ? pooled : normalized(pooled));
    },
  };
}
