/**
 * How many tokens of each text of a pair are kept so that both fit `budget` (the model's length
 * less the special tokens), as Hugging Face tokenizers cut pairs:
 * - `longest_first` cuts the longer text first; when both are too long, each keeps half;
 * - `only_first` / `only_second` cut one text and fail when that is not enough.
 */
export type PairTruncation = 'longest_first' | 'only_first' | 'only_second';

export function pairLengths(
  first: number,
  second: number,
  budget: number,
  strategy: PairTruncation,
): [number, number] | undefined {
  if (first + second <= budget) return [first, second];
  if (strategy === 'only_first') return second < budget ? [budget - second, second] : undefined;
  if (strategy === 'only_second') return first < budget ? [first, budget - first] : undefined;
  // The tokenizers library's longest_first, in closed form.
  const swap = first > second;
  let short = swap ? second : first;
  let long = short > budget ? short : Math.max(short, budget - short);
  if (short + long > budget) {
    short = Math.floor(budget / 2);
    long = short + (budget % 2);
  }
  return swap ? [long, short] : [short, long];
}

/** The start offsets of the overlapping windows a long text is read in: `size` tokens each, `overlap` shared. */
export function windows(length: number, size: number, overlap: number): number[] {
  const starts = [0];
  const step = Math.max(1, size - overlap);
  while (starts[starts.length - 1] + size < length) starts.push(starts[starts.length - 1] + step);
  return starts;
}

/** The pre-tokenizer types (tokenizer.json) that always end a token where whitespace begins. */
export function splitsAtWhitespace(
  config: { type?: string; use_regex?: boolean; split?: boolean; pretokenizers?: unknown[] } | null | undefined,
): boolean {
  switch (config?.type) {
    case 'BertPreTokenizer':
    case 'Whitespace':
    case 'WhitespaceSplit':
      return true;
    case 'ByteLevel':
      return config.use_regex !== false;
    case 'Metaspace':
      return config.split !== false;
    case 'Sequence':
      return (config.pretokenizers ?? []).some((p) =>
        splitsAtWhitespace(p as Parameters<typeof splitsAtWhitespace>[0]),
      );
    default:
      return false;
  }
}

/** Characters per kept token in the first part read: English runs at four or five. */
const FIRST_CHARS_PER_TOKEN = 8;
/** Tokens read past those kept, so that whatever the cut changes at its edge (a normalizer's join) is not kept. */
const CUT_MARGIN = 16;

const isSpace = (code: number) => code === 32 || code === 9 || code === 10 || code === 13;
/** The CJK ideographs of the Basic Multilingual Plane, as BERT's normalizer knows them (the others are surrogate pairs, never cut). */
const isCjkIdeograph = (code: number) =>
  (code >= 0x4e00 && code <= 0x9fff) || (code >= 0x3400 && code <= 0x4dbf) || (code >= 0xf900 && code <= 0xfaff);

/** BERT's punctuation, as its pre-tokenizer (transformers.js's, and the tokenizers library's) isolates it: ASCII's and Unicode's P categories. */
const isBertPunctuation = (code: number) =>
  (code >= 33 && code <= 47) ||
  (code >= 58 && code <= 64) ||
  (code >= 91 && code <= 96) ||
  (code >= 123 && code <= 126) ||
  (code > 127 && /\p{P}/u.test(String.fromCharCode(code)));

let bertPunctuationTable: Uint8Array | undefined;
/**
 * isBertPunctuation for every UTF-16 code unit, built once and cheaply: a boundary is looked for
 * character by character, and testing the expression on each character of a long text without
 * one costs far more than the table (bench/HISTORY.md, figures moved from code).
 */
function bertPunctuation(): Uint8Array {
  if (!bertPunctuationTable) {
    bertPunctuationTable = new Uint8Array(0x10000);
    for (let code = 0; code < 0x10000; code++) if (isBertPunctuation(code)) bertPunctuationTable[code] = 1;
  }
  return bertPunctuationTable;
}

/** A character before which a tokenizer always ends a token (a UTF-16 code unit). */
export type TokenBoundary = (code: number) => boolean;

/**
 * Where a tokenizer, from its tokenizer.json, always ends a token: at whitespace where its
 * pre-tokenizer `splitsAtWhitespace`; before each punctuation character where that is BERT's,
 * which makes each one a token of its own; and before each CJK ideograph where BERT's normalizer
 * puts spaces around them. So a text with no whitespace (Chinese or Japanese, or a megabyte of
 * "!", slow to read whole) can still be read in part. Undefined where no such place is known.
 */
export function tokenBoundaries(
  tokenizer:
    | {
        pre_tokenizer?: Parameters<typeof splitsAtWhitespace>[0];
        normalizer?: { type?: string; handle_chinese_chars?: boolean } | null;
      }
    | undefined,
): TokenBoundary | undefined {
  if (!splitsAtWhitespace(tokenizer?.pre_tokenizer)) return undefined;
  const spacesCjk =
    tokenizer?.normalizer?.type === 'BertNormalizer' && tokenizer.normalizer.handle_chinese_chars === true;
  const punctuation = tokenizer?.pre_tokenizer?.type === 'BertPreTokenizer' ? bertPunctuation() : undefined;
  return (code) => isSpace(code) || punctuation?.[code] === 1 || (spacesCjk && isCjkIdeograph(code));
}

/**
 * The tokens a cut keeps from a long text (its first `keep`, or its last for a left cut),
 * tokenizing only as much of the text as that takes: tokenizing costs time for every character it
 * reads, and a megabyte of text cut to 512 tokens would be read whole for a few thousand
 * characters' worth. The parts read (`growingParts`) end, or cut left begin, at a `boundary`, where
 * the tokenizer ends a token (see tokenBoundaries), so a part's tokens are the whole text's; the
 * first that holds `keep` and a margin serves. Answers the part's tokens (`whole` false: the text
 * holds at least as many) or the whole text's.
 */
export function tokensForCut(
  text: string,
  keep: number,
  direction: 'right' | 'left',
  tokenize: (text: string) => string[],
  boundary: TokenBoundary = isSpace,
): { tokens: string[]; whole: boolean } {
  for (const part of growingParts(text, keep * FIRST_CHARS_PER_TOKEN, direction, boundary)) {
    const tokens = tokenize(part);
    if (tokens.length >= keep + CUT_MARGIN) return { tokens, whole: false };
  }
  return { tokens: tokenize(text), whole: true };
}

/**
 * Ever larger parts of a long text, for work that needs only its start (or, `left`, its end): from
 * `firstChars` characters, fourfold, while a part is under half the text, each ending (beginning)
 * at the first `boundary` past that many characters (whitespace by default, taken from the start
 * of its run). None when no boundary is left; a caller that no part serves reads the whole text.
 */
export function* growingParts(
  text: string,
  firstChars: number,
  direction: 'right' | 'left' = 'right',
  boundary: TokenBoundary = isSpace,
): Generator<string> {
  for (let chars = firstChars; chars * 2 < text.length; chars *= 4) {
    const part =
      direction === 'right' ? headEndingAt(text, chars, boundary) : tailStartingAt(text, text.length - chars, boundary);
    if (part === undefined) return;
    yield part;
  }
}

/** The text up to the first boundary at or after `from`; undefined if there is none. */
function headEndingAt(text: string, from: number, boundary: TokenBoundary): string | undefined {
  let i = from;
  while (i < text.length && !boundary(text.charCodeAt(i))) i++;
  if (i === text.length) return undefined;
  while (i > 0 && isSpace(text.charCodeAt(i - 1))) i--;
  return text.slice(0, i);
}

/** The text from the last boundary at or before `from`; undefined if there is none. */
function tailStartingAt(text: string, from: number, boundary: TokenBoundary): string | undefined {
  let i = from;
  while (i >= 0 && !boundary(text.charCodeAt(i))) i--;
  if (i < 0) return undefined;
  while (i > 0 && isSpace(text.charCodeAt(i - 1))) i--;
  return text.slice(i);
}
