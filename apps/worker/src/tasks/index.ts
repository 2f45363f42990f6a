import { ApiError, type Operation, type Task } from '@tserve/contract';
import type { LoadedModel } from '../model/model.js';
import type { TaskHead } from './head.js';
import { textClassificationHead } from './text-classification.js';
import { fillMaskHead } from './fill-mask.js';
import { tokenClassificationHead } from './token-classification.js';
import { featureExtractionHead } from './feature-extraction.js';
import { questionAnsweringHead } from './question-answering.js';
import { zeroShotClassificationHead } from './zero-shot-classification.js';
import { sentenceSimilarityHead } from './sentence-similarity.js';
import { tokenizeHead } from './tokenize.js';
import { decodeHead } from './decode.js';
import { sparseHead } from './sparse.js';

export type { TaskHead } from './head.js';

/** The head for a request's task; the model's own task when the request names none. */
export type TaskHeads = (task: Operation | undefined) => TaskHead;

const HEADS: Record<Task, (loaded: LoadedModel) => TaskHead> = {
  'text-classification': textClassificationHead,
  'fill-mask': fillMaskHead,
  'token-classification': tokenClassificationHead,
  'feature-extraction': featureExtractionHead,
  'question-answering': questionAnsweringHead,
  'zero-shot-classification': zeroShotClassificationHead,
  'sentence-similarity': sentenceSimilarityHead,
};

/** One head per task the model serves, tokenization and decoding, and sparse vectors where it serves them, built once. */
export function headsFor(loaded: LoadedModel): TaskHeads {
  const heads = new Map<Operation, TaskHead>(loaded.tasks.map((task) => [task, HEADS[task](loaded)]));
  heads.set('tokenize', tokenizeHead(loaded));
  heads.set('decode', decodeHead(loaded));
  if (loaded.splade) heads.set('embed-sparse', sparseHead(loaded, loaded.splade));
  return (task = loaded.task) => {
    const head = heads.get(task);
    if (!head)
      throw new ApiError('validation', `model ${loaded.id} cannot serve ${task}; it serves ${loaded.tasks.join(', ')}`);
    return head;
  };
}
