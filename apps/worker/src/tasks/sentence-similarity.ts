import type { SentenceSimilarityInput, SentenceSimilarityParameters } from '@tserve/contract';
import type { LoadedModel } from '../model/model.js';
import type { TaskHead } from './head.js';
import { featureExtractionHead } from './feature-extraction.js';
import { encodePrompted } from './prompts.js';

/**
 * Cosine similarity of each sentence to the source sentence, from the model's normalised
 * embeddings, pooled as its own (feature-extraction.ts); the source and each sentence are sequences
 * of the same batch.
 */
export function sentenceSimilarityHead(
  loaded: LoadedModel,
): TaskHead<SentenceSimilarityParameters, SentenceSimilarityInput> {
  const embed = featureExtractionHead(loaded);
  return {
    encode(input, parameters, engine) {
      const truncate = parameters.truncation ?? true;
      // The model's default prompt, as its embeddings get it (sentence-transformers' similarity).
      return [input.source_sentence, ...input.sentences].flatMap((text) =>
        encodePrompted(loaded, text, { truncation: truncate }, engine),
      );
    },
    decode(output, index, encoded) {
      return embed.decode(output, index, encoded, { normalize: true });
    },
    combine(parts) {
      const [source, ...sentences] = parts as number[][];
      return sentences.map((v) => v.reduce((sum, x, j) => sum + x * source[j], 0));
    },
  };
}
