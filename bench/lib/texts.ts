import { AutoTokenizer, env } from '@huggingface/transformers';
import { PROSE } from '../../test/helpers/texts.ts';

/**
 * Inputs of an exact token length for one model's tokenizer, special tokens included: the
 * server pads and batches by token count, so "16 tokens" must mean 16 to the model, not 16 words.
 */

type Tokenizer = Awaited<ReturnType<typeof AutoTokenizer.from_pretrained>>;

export async function loadTokenizer(model: string, modelDir: string): Promise<Tokenizer> {
  env.allowRemoteModels = false;
  env.allowLocalModels = true;
  env.localModelPath = modelDir;
  return AutoTokenizer.from_pretrained(model);
}

function tokenCount(tokenizer: Tokenizer, text: string): number {
  return tokenizer.encode(text).length;
}

/** Words of the prose, repeated, until the text is `target` tokens long; `offset` varies the wording. */
export function craftText(tokenizer: Tokenizer, target: number, offset = 0): string {
  const words: string[] = [];
  for (let i = 0; tokenCount(tokenizer, words.join(' ')) < target; i++) {
    const word = PROSE[(offset + i) % PROSE.length];
    words.push(word);
    // A word that splits into several pieces may overshoot; drop it and try the next one.
    if (tokenCount(tokenizer, words.join(' ')) > target) words.pop();
    if (i > target * 20) break;
  }
  const text = words.join(' ');
  const got = tokenCount(tokenizer, text);
  if (got !== target) throw new Error(`could not craft a ${target}-token text for this tokenizer (got ${got})`);
  return text;
}
