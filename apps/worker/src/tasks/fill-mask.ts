import { ApiError, FILL_MASK_MOST_CANDIDATES, softmaxOf, type FillMaskParameters } from '@tserve/contract';
import type { LoadedModel } from '../model/model.js';
import type { TaskHead } from './head.js';
import { topK } from './math.js';

export function fillMaskHead(loaded: LoadedModel): TaskHead<FillMaskParameters, string> {
  const { tokenizer } = loaded;
  const maskId = tokenizer.mask_token_id;
  const maskToken = tokenizer.mask_token ?? '[MASK]';
  const maskPositions = (ids: number[]) => ids.flatMap((id, i) => (id === maskId ? [i] : []));
  return {
    check(encoded, parameters) {
      if (maskId === undefined || maskId === null) throw new ApiError('validation', 'this model has no mask token');
      const masks = maskPositions(encoded.ids).length;
      if (masks === 0)
        throw new ApiError(
          'validation',
          `input must contain the mask token ${maskToken}: "${encoded.text.slice(0, 80)}"`,
        );
      const k = parameters.top_k ?? 5;
      if (masks * k > FILL_MASK_MOST_CANDIDATES) {
        throw new ApiError(
          'validation',
          `input has ${masks} mask tokens and top_k is ${k}: ${masks * k} candidates, at most ${FILL_MASK_MOST_CANDIDATES} are given per input (mask tokens x top_k)`,
        );
      }
    },
    decode(output, index, encoded, parameters) {
      const [, length, vocab] = output.dims;
      const k = parameters.top_k ?? 5;
      const positions = maskPositions(encoded.ids);
      const perMask = positions.map((pos) => {
        const start = (index * length + pos) * vocab;
        const logits = output.data.subarray(start, start + vocab);
        // Only the candidates' probabilities: an input may hold hundreds of masks.
        const probability = softmaxOf(logits);
        return topK(logits, k).map((token) => {
          const filled = encoded.ids.slice();
          filled[pos] = token;
          return {
            score: probability(token),
            token,
            token_str: tokenizer.decode([token]),
            sequence: tokenizer.decode(filled, { skip_special_tokens: true }),
          };
        });
      });
      // As the HF pipeline: one mask gives a list of candidates, several give a list per mask.
      return perMask.length === 1 ? perMask[0] : perMask;
    },
  };
}
