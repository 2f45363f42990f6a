import { ApiError, type TokenizeParameters } from '@tserve/contract';
import type { LoadedModel } from '../model/model.js';
import type { TaskHead } from './head.js';
import { promptOf } from './prompts.js';
import { alignTokens, tokenizerParts } from './offsets.js';

/** One token as TEI's /tokenize reports it; `start`/`stop` are offsets into the input, null for added special tokens. */
interface TokenInfo {
  id: number;
  text: string;
  special: boolean;
  start: number | null;
  stop: number | null;
}

/**
 * TEI's bound on a text it tokenizes whole (its MAX_CHAR_MULTIPLIER): characters per token of the
 * model's length. A longer one is refused before any tokenizing, which for a megabyte would hold
 * the worker's thread long and answer many times the text's size (bench/HISTORY.md).
 */
const CHARS_PER_TOKEN = 250;

/**
 * Tokenization alone, without running the model: each token's id, its text in the input, and
 * where it lies (code points, as the other tasks' offsets), special tokens flagged.
 */
export function tokenizeHead(loaded: LoadedModel): TaskHead<TokenizeParameters, string> {
  const parts = tokenizerParts(loaded.tokenizer);
  return {
    decode() {
      throw new Error('tokenization runs no model');
    },
    answer(text, parameters, engine): TokenInfo[] {
      // The text as the model reads it, its prompt first; offsets still count into the text sent,
      // and the prompt's tokens, which are not in it, have none.
      const prompt = promptOf(loaded, parameters.prompt_name);
      const input = prompt + text;
      const promptChars = Array.from(prompt).length;
      // Code points, as TEI counts them (and as the offsets below do).
      const chars = Array.from(input);
      const limit = loaded.maxLength * CHARS_PER_TOKEN;
      if (chars.length > limit)
        throw new ApiError('validation', `\`inputs\` must have less than ${limit} characters. Given: ${chars.length}`);
      const pieces = engine.pieces(input);
      const spans = alignTokens(input, pieces, parts);
      const tokens: TokenInfo[] = pieces.map((piece, i) => {
        const span = spans[i];
        const inText = span && span[0] >= promptChars ? span : undefined;
        return {
          id: engine.idOf(piece),
          text: span ? chars.slice(span[0], span[1]).join('') : piece,
          special: false,
          start: inText ? inText[0] - promptChars : null,
          stop: inText ? inText[1] - promptChars : null,
        };
      });
      if (parameters.add_special_tokens === false) return tokens;
      // The template's tokens around the text ([CLS] … [SEP]), flagged special.
      const built = engine.build(pieces);
      return built.ids.map((id, k) => {
        const inner = k - built.at;
        if (inner >= 0 && inner < tokens.length) return tokens[inner];
        return { id, text: engine.tokenString(id), special: true, start: null, stop: null };
      });
    },
  };
}
