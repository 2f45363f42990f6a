/**
 * What `function_to_apply` means: how a classifier's logits become scores. Workers score with it;
 * a gateway that got a model's logits applies the model's default function itself rather than run
 * the model a second time for its scores.
 */

export const SCORE_FUNCTIONS = ['softmax', 'sigmoid', 'none'] as const;
export type ScoreFunction = (typeof SCORE_FUNCTIONS)[number];
/** What a model applies when a request names no function. */
export type DefaultScoreFunction = Exclude<ScoreFunction, 'none'>;

/** The largest value and the sum of exp(value - largest): what a softmax divides by. Each exp goes into `out` when given. */
function softmaxTerms(values: ArrayLike<number>, out?: Float64Array): { max: number; sum: number } {
  let max = -Infinity;
  for (let i = 0; i < values.length; i++) if (values[i] > max) max = values[i];
  let sum = 0;
  for (let i = 0; i < values.length; i++) {
    const e = Math.exp(values[i] - max);
    if (out) out[i] = e;
    sum += e;
  }
  return { max, sum };
}

export function softmax(values: ArrayLike<number>): Float64Array {
  const out = new Float64Array(values.length);
  const { sum } = softmaxTerms(values, out);
  for (let i = 0; i < out.length; i++) out[i] /= sum;
  return out;
}

/** The softmax of single entries, the same numbers as softmax(values)[index], without an array of them all (fill-mask reads a few of a vocabulary per mask). */
export function softmaxOf(values: ArrayLike<number>): (index: number) => number {
  const { max, sum } = softmaxTerms(values);
  return (index) => Math.exp(values[index] - max) / sum;
}

function sigmoid(values: ArrayLike<number>): Float64Array {
  return Float64Array.from(values, (v) => 1 / (1 + Math.exp(-v)));
}

export function applyScoreFunction(fn: ScoreFunction, logits: ArrayLike<number>): Float64Array {
  return fn === 'softmax' ? softmax(logits) : fn === 'sigmoid' ? sigmoid(logits) : Float64Array.from(logits);
}

/** As the HF pipelines choose: multi-label and single-logit models are scored with a sigmoid, others with a softmax. */
export function defaultScoreFunction(config: {
  problem_type?: string;
  id2label?: Record<string, string>;
}): DefaultScoreFunction {
  return config.problem_type === 'multi_label_classification' || Object.keys(config.id2label ?? {}).length === 1
    ? 'sigmoid'
    : 'softmax';
}
