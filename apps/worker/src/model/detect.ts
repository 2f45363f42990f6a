import type { Task } from '@tserve/contract';

/** What task detection reads of a model's config.json. */
export interface TaskConfig {
  architectures?: string[];
  label2id?: Record<string, number>;
  id2label?: Record<string, string>;
}

/** The id of an NLI model's entailment label, as the zero-shot pipeline finds it; undefined for other models. */
export function entailmentId(config: TaskConfig): number | undefined {
  for (const [label, id] of Object.entries(config.label2id ?? {}))
    if (label.toLowerCase().startsWith('entail')) return Number(id);
  for (const [id, label] of Object.entries(config.id2label ?? {}))
    if (label.toLowerCase().startsWith('entail')) return Number(id);
  return undefined;
}

/**
 * The task a model was trained for, read from its architecture as the HF pipelines do; a sequence
 * classifier with an entailment label is an NLI model, served for zero-shot classification.
 */
export function taskFromConfig(config: TaskConfig): Task | undefined {
  const arch = config.architectures?.[0] ?? '';
  if (arch.endsWith('ForSequenceClassification'))
    return entailmentId(config) === undefined ? 'text-classification' : 'zero-shot-classification';
  if (arch.endsWith('ForQuestionAnswering')) return 'question-answering';
  if (arch.endsWith('ForMaskedLM')) return 'fill-mask';
  if (arch.endsWith('ForTokenClassification')) return 'token-classification';
  if (arch.endsWith('Model')) return 'feature-extraction';
  return undefined;
}

/** Every task a model of this task can serve: the same outputs read another way. */
export function tasksServed(task: Task, config: TaskConfig): Task[] {
  switch (task) {
    case 'text-classification':
      return entailmentId(config) === undefined ? [task] : [task, 'zero-shot-classification'];
    case 'zero-shot-classification':
      return [task, 'text-classification'];
    case 'feature-extraction':
      return [task, 'sentence-similarity'];
    case 'sentence-similarity':
      return [task, 'feature-extraction'];
    default:
      return [task];
  }
}
