import { ApiError } from '@tserve/contract';
import type { GatewayConfig } from '@tserve/config';

/**
 * Token ids sent as OpenAI embeddings' `input`, read back into their text. They are ids of OpenAI's
 * tokenizer (tiktoken), which clients such as LangChain's OpenAIEmbeddings send by default, not of
 * the served model's: the model's own tokenizer reads the text they encode. The one module on
 * `js-tiktoken`; an encoding's ranks (about 90 MB in memory) load at the first request that needs
 * them, never at start.
 */

type Encoding = Exclude<GatewayConfig['OPENAI_TOKEN_ENCODING'], 'off'>;

const RANKS = {
  cl100k_base: () => import('js-tiktoken/ranks/cl100k_base'),
  o200k_base: () => import('js-tiktoken/ranks/o200k_base'),
  p50k_base: () => import('js-tiktoken/ranks/p50k_base'),
  r50k_base: () => import('js-tiktoken/ranks/r50k_base'),
} satisfies Record<Encoding, () => Promise<unknown>>;

/** An encoding ready to decode: its tokenizer, and which ids it has (js-tiktoken skips an unknown one silently). */
interface Loaded {
  decode: (ids: number[]) => string;
  has: (id: number) => boolean;
}

async function load(encoding: Encoding): Promise<Loaded> {
  const [{ Tiktoken }, { default: ranks }] = await Promise.all([import('js-tiktoken/lite'), RANKS[encoding]()]);
  const tokenizer = new Tiktoken(ranks);
  const specials = Object.values(ranks.special_tokens);
  // Every encoding numbers its special tokens past its ranks.
  const known = new Uint8Array(Math.max(...specials, 0) + 1);
  for (let id = 0; id < known.length; id++) if (tokenizer.decode([id]).length) known[id] = 1;
  return {
    decode: (ids) => tokenizer.decode(ids),
    has: (id) => id < known.length && known[id] === 1,
  };
}

/** Token ids into texts, in the encoding OPENAI_TOKEN_ENCODING names. */
export class TokenTexts {
  private loading?: Promise<Loaded>;

  constructor(private readonly encoding: GatewayConfig['OPENAI_TOKEN_ENCODING']) {}

  /** Each sequence of ids as the text it encodes; 400 for an id the encoding lacks, or with the setting off. */
  async texts(sequences: number[][]): Promise<string[]> {
    const encoding = this.encoding;
    if (encoding === 'off')
      throw new ApiError(
        'validation',
        "input must be text: token ids are not accepted here (OPENAI_TOKEN_ENCODING=off); send the strings (LangChain's OpenAIEmbeddings: check_embedding_ctx_length=False)",
      );
    this.loading ??= load(encoding);
    const loaded = await this.loading;
    return sequences.map((ids, i) => {
      const unknown = ids.find((id) => !loaded.has(id));
      if (unknown !== undefined)
        throw new ApiError(
          'validation',
          `input.${i}: token id ${unknown} is not in ${encoding} (OPENAI_TOKEN_ENCODING)`,
        );
      return loaded.decode(ids);
    });
  }
}
