import { ApiError, type FeatureExtractionParameters } from '@tserve/contract';
import type { BatchOutput } from '../model/engine.js';
import type { LoadedModel } from '../model/model.js';
import type { PoolingMode } from '../model/sentence-transformers.js';
import type { TaskHead } from './head.js';
import { encodePrompted, type PromptNote } from './prompts.js';

function normalized(vector: Float64Array): Float64Array {
  let norm = 0;
  for (const v of vector) norm += v * v;
  norm = Math.sqrt(norm) || 1;
  return vector.map((v) => v / norm);
}

/**
 * One pooling mode over a sequence's token vectors, as sentence-transformers' Pooling computes it
 * for the sequence alone. `from`: the first token pooled (after a prompt left out of the pooling).
 */
function pool(mode: PoolingMode, at: (t: number) => Float32Array, tokens: number, from = 0): Float64Array {
  const width = at(0).length;
  const pooled = new Float64Array(width);
  // Every token left out (a prompt as long as the sequence): sentence-transformers' masked sums are zeros.
  if (from >= tokens) return mode === 'max' ? pooled.fill(Number.NEGATIVE_INFINITY) : pooled;
  switch (mode) {
    case 'cls':
      // The first token pooled: [CLS], or the first after a prompt left out.
      pooled.set(at(from));
      return pooled;
    case 'lasttoken':
      pooled.set(at(tokens - 1));
      return pooled;
    case 'max': {
      pooled.fill(Number.NEGATIVE_INFINITY);
      for (let t = from; t < tokens; t++) {
        const v = at(t);
        for (let j = 0; j < width; j++) if (v[j] > pooled[j]) pooled[j] = v[j];
      }
      return pooled;
    }
    default: {
      // mean, mean_sqrt_len_tokens, weightedmean (each token weighted by its position, from 1).
      let weights = 0;
      for (let t = from; t < tokens; t++) {
        const v = at(t);
        const weight = mode === 'weightedmean' ? t + 1 : 1;
        weights += weight;
        for (let j = 0; j < width; j++) pooled[j] += weight * v[j];
      }
      const divisor = mode === 'mean_sqrt_len_tokens' ? Math.sqrt(weights) : weights;
      for (let j = 0; j < width; j++) pooled[j] /= divisor;
      return pooled;
    }
  }
}

/** The pooling a request names, as sentence-transformers calls it. */
const REQUESTED: Record<'mean' | 'cls', PoolingMode> = { mean: 'mean', cls: 'cls' };

/**
 * Sentence embeddings as sentence-transformers makes them from the model's folder (modules.json):
 * its pooling modes over the real tokens (a prompt's left out where the folder says), its Dense
 * head where the ONNX graph runs it (the sentence_embedding output), and its Normalize. A folder
 * without modules.json is pooled as sentence-transformers pools one: mean, and normalised here
 * unless the request says not. A request's own pooling (mean, cls, or none: each token's vector)
 * and normalize win.
 */
export function featureExtractionHead(loaded: LoadedModel): TaskHead<FeatureExtractionParameters, string> {
  // The width of a token's vector, as the config names it; a config that names none is taken as wide.
  const width =
    [loaded.config.hidden_size, loaded.config.dim, loaded.config.d_model].find(
      (w): w is number => typeof w === 'number',
    ) ?? 4096;
  const own = loaded.sentence;
  const modes = own?.pooling ?? ['mean'];
  const inGraph = (own?.dense.length ?? 0) > 0;
  return {
    encode: (input, parameters, engine) => encodePrompted(loaded, input, parameters, engine),
    check(_encoded, parameters) {
      const asked = parameters.pooling;
      if (!inGraph || asked === undefined || asked === 'none') return;
      if (modes.length === 1 && modes[0] === REQUESTED[asked]) return;
      throw new ApiError(
        'validation',
        `model ${loaded.id} pools its tokens by ${modes.join(' + ')} before its Dense head (${own!.dense.join(', ')}), which its ONNX graph runs on that pooling alone: pooling "${asked}" cannot be served; leave pooling out, or ask for "none" (each token's vector)`,
      );
    },
    answerValues(encoded, parameters) {
      return parameters.pooling === 'none' ? encoded.ids.length * width : modes.length * width;
    },
    decode(output, index, encoded, parameters) {
      const [, length, size] = output.dims;
      const tokens = encoded.ids.length;
      const at = (t: number) => output.data.subarray((index * length + t) * size, (index * length + t + 1) * size);
      if (parameters.pooling === 'none') {
        return Array.from({ length: tokens }, (_, t) => {
          const v = Float64Array.from(at(t));
          return Array.from(parameters.normalize ? normalized(v) : v);
        });
      }
      const normalize = parameters.normalize ?? own?.normalize ?? true;
      if (inGraph) {
        const vector = Float64Array.from(sentenceRow(output, index, loaded.id));
        return Array.from(normalize && !own!.normalize ? normalized(vector) : vector);
      }
      const from = own?.includePrompt === false ? ((encoded.note as PromptNote | undefined)?.promptTokens ?? 0) : 0;
      const chosen = parameters.pooling ? [REQUESTED[parameters.pooling]] : modes;
      const parts = chosen.map((mode) => pool(mode, at, tokens, from));
      const pooled = parts.length === 1 ? parts[0] : concatenated(parts);
      return Array.from(normalize ? normalized(pooled) : pooled);
    },
  };
}

/** One row of the export's own embeddings (sentence_embedding): pooling, Dense and Normalize run in its graph. */
function sentenceRow(output: BatchOutput, index: number, id: string): Float32Array {
  if (!output.sentence) throw new ApiError('internal', `model ${id}'s ONNX file gave no sentence_embedding output`);
  const size = output.sentence.dims[1];
  return output.sentence.data.subarray(index * size, (index + 1) * size);
}

function concatenated(parts: Float64Array[]): Float64Array {
  const whole = new Float64Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    whole.set(part, at);
    at += part.length;
  }
  return whole;
}
