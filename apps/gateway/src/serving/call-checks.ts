import {
  ApiError,
  describeIssues,
  normalizeInput,
  parameterSchemas,
  taskInputSchemas,
  taskOfInputs,
  type Operation,
  type TaskInput,
  type TaskParameters,
} from '@tserve/contract';
import type { ServedModel } from './served-models.js';

/** A call checked against its model, once the model is known: its task, its inputs, its parameters. */

/** The task asked for, or told by the inputs' shape, or the model's own; 400 if the model cannot serve it. */
export function taskFor(
  served: ServedModel,
  call: { task?: Operation; inputs: unknown; parameters: Record<string, unknown> },
): Operation {
  // Every model's tokenizer can tokenize; a model with SPLADE pooling also gives sparse vectors.
  if (call.task === 'tokenize' || (call.task === 'embed-sparse' && served.sparse)) return call.task;
  let task = call.task ?? taskOfInputs(call.inputs);
  // An NLI model classifies one text zero-shot when given candidate labels.
  if (!task && 'candidate_labels' in call.parameters && served.tasks.includes('zero-shot-classification'))
    task = 'zero-shot-classification';
  task ??= served.task;
  const serves: readonly Operation[] = served.tasks;
  if (!serves.includes(task)) {
    throw new ApiError('validation', `model ${served.id} cannot serve ${task}; it serves ${served.tasks.join(', ')}`);
  }
  return task;
}

export function checkInputs(task: Operation, raw: unknown): { inputs: TaskInput[]; single: boolean } {
  const parsed = taskInputSchemas[task].safeParse(raw);
  if (!parsed.success)
    throw new ApiError('validation', `invalid inputs for ${task}: ${describeIssues(parsed.error, 'inputs')}`);
  const value = parsed.data as Parameters<typeof normalizeInput>[0] | Array<Parameters<typeof normalizeInput>[0]>;
  return Array.isArray(value)
    ? { inputs: value.map(normalizeInput), single: false }
    : { inputs: [normalizeInput(value)], single: true };
}

export function checkParameters(
  task: Operation,
  parameters: Record<string, unknown>,
  api: 'inference-api' | 'pipeline',
): TaskParameters {
  // The Inference API groups entities unless told otherwise; a pipeline called on a text does not.
  const defaults = api === 'inference-api' && task === 'token-classification' ? { aggregation_strategy: 'simple' } : {};
  const parsed = parameterSchemas[task].safeParse({ ...defaults, ...parameters });
  if (!parsed.success)
    throw new ApiError('validation', `invalid parameters for ${task}: ${describeIssues(parsed.error, 'parameters')}`);
  return parsed.data;
}
