/**
 * What `function_to_apply` means: how a classifier's logits become scores. Workers score with it;
 * a gateway that got a model's logits applies the model's default function itself rather than run
 * the model a second time for its scores.
 */

export const SCORE_FUNCTIONS = ['softmax', 'sigmoid', 'none'] as const;
export type ScoreFunction = (typeof SCORE_FUNCTIONS)[number];
/** What a model applies when a request names no function. */
export type DefaultScoreFunction = Exclude<ScoreFunction, 'none'>;

export function softmax(values: ArrayLike<number>): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < values.length; i++) if (values[i] > max) max = values[i];
  const out = new Float64Array(values.length);
  let sum = 0;
  for (let i = 0; i < values.length; i++) {
    out[i] = Math.exp(values[i] - max);
    sum += out[i];
  }
  for (let i = 0; i < out.length; i++) out[i] /= sum;
  return out;
}

function sigmoid(values: ArrayLike<number>): Float64Array {
  return Float64Array.from(values, (v) => 1 / (1 + Math.exp(-v)));
}

export function applyScoreFunction(fn: ScoreFunction, logits: ArrayLike<number>): Float64Array {
  return fn === 'softmax' ? softmax(logits) : fn === 'sigmoid' ? sigmoid(logits) : Float64Array.from(logits);
}

/** As the HF pipelines choose: multi-label and single-logit models are scored with a sigmoid, others with a softmax. */
export function defaultScoreFunction(config: { problem_type?: string; id2label?: Record<string, string> }): DefaultScoreFunction {
  return config.problem_type === 'multi_label_classification' || Object.keys(config.id2label ?? {}).length === 1 ? 'sigmoid' : 'softmax';
}
