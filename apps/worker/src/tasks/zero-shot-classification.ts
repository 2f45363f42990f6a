import { ApiError, softmax, type ZeroShotParameters } from '@tserve/contract';
import type { LoadedModel } from '../model/model.js';
import type { TaskHead } from './head.js';
import { entailmentId } from '../model/detect.js';
import { row } from './math.js';

const DEFAULT_TEMPLATE = 'This example is {}.';

/**
 * Zero-shot classification with an NLI model, as the transformers pipeline defines it: each
 * candidate label becomes the hypothesis of one pair (text, template with the label), cut
 * only from the text. With one label, or multi_label, each label is scored alone by entailment
 * against contradiction; otherwise the entailment logits are compared across labels. Contradiction is
 * the pipeline's: the first logit, or the last where entailment is the first (a two-label
 * `entailment` / `not_entailment` head).
 */
export function zeroShotClassificationHead(loaded: LoadedModel): TaskHead<ZeroShotParameters, string> {
  const entailment = entailmentId(loaded.config);
  return {
    encode(input, parameters, engine) {
      if (entailment === undefined) {
        throw new ApiError(
          'validation',
          `model ${loaded.id} has no entailment label (config.json label2id), so it cannot classify zero-shot`,
        );
      }
      const template = parameters.hypothesis_template ?? DEFAULT_TEMPLATE;
      const truncate = parameters.truncation ?? true;
      return parameters.candidate_labels.map((label) =>
        engine.encodePair(input, template.replaceAll('{}', label), truncate ? 'only_first' : false),
      );
    },
    decode(output, index) {
      return Array.from(row(output.data, index, output.dims[1]));
    },
    combine(parts, input, parameters) {
      const logits = parts as number[][];
      const multi = parameters.multi_label === true || logits.length === 1;
      const contradiction = (l: number[]) => (entailment === 0 ? l[l.length - 1] : l[0]);
      const scores = multi
        ? logits.map((l) => softmax([contradiction(l), l[entailment!]])[1])
        : Array.from(softmax(logits.map((l) => l[entailment!])));
      const order = scores.map((_, i) => i).sort((a, b) => scores[b] - scores[a]);
      return {
        sequence: input,
        labels: order.map((i) => parameters.candidate_labels[i]),
        scores: order.map((i) => scores[i]),
      };
    },
  };
}
