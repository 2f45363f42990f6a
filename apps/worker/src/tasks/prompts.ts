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

/** What an embedding head needs to read a sequence back: how many of its first tokens are its prompt's. */
export interface PromptNote {
  promptTokens: number;
}

/**
 * One text as the embedding heads run it: its prompt first, lower-cased where the model's folder
 * says (do_lower_case), cut as its request says (right, by default). Where the model leaves its
 * prompt out of the pooling (include_prompt false), the note says how many tokens the prompt is, as
 * sentence-transformers counts them: the prompt tokenized alone, less a special token that ends it.
 */
export function encodePrompted(
  loaded: LoadedModel,
  input: string,
  parameters: { prompt_name?: string; truncation?: boolean; truncation_direction?: 'right' | 'left' },
  engine: Engine,
): Encoded[] {
  const prompt = promptOf(loaded, parameters.prompt_name);
  const text = loaded.lowercase ? (prompt + input).toLowerCase() : prompt + input;
  const direction = parameters.truncation_direction;
  const encoded = engine.encode(text, { truncate: parameters.truncation ?? true, direction });
  if (loaded.sentence?.includePrompt !== false || prompt === '') return [encoded];
  // A left cut takes the prompt's tokens first: what is left of it is not known, and none is left out.
  const cutLeft = direction === 'left' && encoded.truncatedFrom !== undefined;
  const note: PromptNote = {
    promptTokens: cutLeft ? 0 : promptTokens(engine, loaded.lowercase ? prompt.toLowerCase() : prompt),
  };
  return [{ ...encoded, note }];
}

/** The tokens of a prompt, as sentence-transformers counts them to leave them out of the pooling. */
function promptTokens(engine: Engine, prompt: string): number {
  const { ids } = engine.build(engine.pieces(prompt));
  const specials = new Set(engine.build([]).ids);
  return ids.length - (ids.length && specials.has(ids[ids.length - 1]) ? 1 : 0);
}
