import { ApiError } from '@tserve/contract';
import type { Encoded, Engine } from '../model/engine.js';
import type { LoadedModel } from '../model/model.js';

/**
 * The text put before an input: the prompt its request names (`prompt_name`), or the model's
 * default one ('' for none). The model reads the two as one text, as sentence-transformers does.
 */
export function promptOf(loaded: LoadedModel, name: string | undefined): string {
  if (name === undefined) return loaded.defaultPrompt;
  const prompt = loaded.prompts[name];
  if (prompt !== undefined) return prompt;
  const known = Object.keys(loaded.prompts);
  throw new ApiError(
    'validation',
    known.length
      ? `prompt_name "${name}" is not one of model ${loaded.id}'s prompts: ${known.join(', ')}`
      : `prompt_name "${name}": model ${loaded.id} has no prompts (config_sentence_transformers.json names none)`,
  );
}

/** One text as the embedding heads run it: its prompt first, cut as its request says (right, by default). */
export function encodePrompted(
  loaded: LoadedModel,
  input: string,
  parameters: { prompt_name?: string; truncation?: boolean; truncation_direction?: 'right' | 'left' },
  engine: Engine,
): Encoded[] {
  const text = promptOf(loaded, parameters.prompt_name) + input;
  return [engine.encode(text, { truncate: parameters.truncation ?? true, direction: parameters.truncation_direction })];
}
