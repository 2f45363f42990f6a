import { ApiError, type DecodeParameters, type TokenIds } from '@tserve/contract';
import type { LoadedModel } from '../model/model.js';
import type { TaskHead } from './head.js';

/**
 * Most ids one input may hold, per token of the model's length: as tokenization bounds a text's
 * characters (tokenize.ts), so that one input cannot hold the worker's thread for long.
 */
const IDS_PER_TOKEN = 250;

/**
 * Token ids back into text, without running the model, as TEI's /decode does it with Hugging Face
 * tokenizers: special tokens left out unless asked for, and ids the vocabulary lacks left out.
 */
export function decodeHead(loaded: LoadedModel): TaskHead<DecodeParameters, TokenIds> {
  const limit = loaded.maxLength * IDS_PER_TOKEN;
  return {
    decode() {
      throw new Error('decoding runs no model');
    },
    answer({ ids }, parameters, engine): string {
      if (ids.length > limit)
        throw new ApiError('validation', `\`ids\` must hold at most ${limit} ids. Given: ${ids.length}`);
      return engine.text(ids, parameters.skip_special_tokens ?? true);
    },
  };
}
