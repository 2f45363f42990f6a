import type { Task } from '@tserve/contract';
import type { LoadedModel } from '../model.js';
import type { TaskHead } from './head.js';
import { textClassificationHead } from './text-classification.js';
import { fillMaskHead } from './fill-mask.js';
import { tokenClassificationHead } from './token-classification.js';
import { featureExtractionHead } from './feature-extraction.js';

export type { TaskHead } from './head.js';

const HEADS: Record<Task, (loaded: LoadedModel) => TaskHead> = {
  'text-classification': textClassificationHead as (loaded: LoadedModel) => TaskHead,
  'fill-mask': fillMaskHead as (loaded: LoadedModel) => TaskHead,
  'token-classification': tokenClassificationHead as (loaded: LoadedModel) => TaskHead,
  'feature-extraction': featureExtractionHead as (loaded: LoadedModel) => TaskHead,
};

export function headFor(loaded: LoadedModel): TaskHead {
  return HEADS[loaded.task](loaded);
}
