import {
  applyScoreFunction,
  defaultScoreFunction,
  type TextClassificationParameters,
  type TextPair,
} from '@tserve/contract';
import type { LoadedModel } from '../model/model.js';
import type { TaskHead } from './head.js';
import { row } from './math.js';

/**
 * Labels for a text, or for a pair of texts (cross-encoders, NLI models), which runs as one
 * sequence: [CLS] text [SEP] text_pair [SEP], cut longest-first when too long.
 */
export function textClassificationHead(loaded: LoadedModel): TaskHead<TextClassificationParameters, string | TextPair> {
  const labels = loaded.config.id2label ?? {};
  const defaultFunction = defaultScoreFunction(loaded.config);
  return {
    encode(input, parameters, engine) {
      const truncate = parameters.truncation ?? true;
      const direction = parameters.truncation_direction;
      if (typeof input === 'string') return [engine.encode(input, { truncate, direction })];
      return [
        engine.encodePair(
          input.text,
          input.text_pair,
          truncate ? 'longest_first' : false,
          direction,
          parameters.text_pair_max_tokens,
        ),
      ];
    },
    decode(output, index, _encoded, parameters) {
      const classes = output.dims[1];
      const logits = row(output.data, index, classes);
      const scores = applyScoreFunction(parameters.function_to_apply ?? defaultFunction, logits);
      const ranked = Array.from(scores, (score, i) => ({ label: labels[i] ?? `LABEL_${i}`, score })).sort(
        (a, b) => b.score - a.score,
      );
      const k = parameters.top_k === null ? ranked.length : (parameters.top_k ?? 1);
      return ranked.slice(0, k);
    },
  };
}
