import type { SentenceSimilarityInput, SentenceSimilarityParameters } from '@tserve/contract';
import type { LoadedModel } from '../model/model.js';
import type { TaskHead } from './head.js';
import { featureExtractionHead } from './feature-extraction.js';

/**
 * Cosine similarity of each sentence to the source sentence, from the model's mean-pooled,
 * normalised embeddings; the source and each sentence are sequences of the same batch.
 */
export function sentenceSimilarityHead(
  loaded: LoadedModel,
): TaskHead<SentenceSimilarityParameters, SentenceSimilarityInput> {
  const embed = featureExtractionHead(loaded);
  return {
    encode(input, parameters, engine) {
      const truncate = parameters.truncation ?? true;
      // The model's default prompt, as its embeddings get it (sentence-transformers' similarity).
      return [input.source_sentence, ...input.sentences].map((text) =>
        engine.encode(loaded.defaultPrompt + text, truncate),
      );
    },
    decode(output, index, encoded) {
      return embed.decode(output, index, encoded, { normalize: true, pooling: 'mean' });
    },
    combine(parts) {
      const [source, ...sentences] = parts as number[][];
      return sentences.map((v) => v.reduce((sum, x, j) => sum + x * source[j], 0));
    },
  };
}
