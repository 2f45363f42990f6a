/**
 * Character offsets of WordPiece tokens in the original input, which transformers.js's tokenizers
 * do not report. The input is normalized one code point at a time with the tokenizer's own
 * normalizer (lower-casing, accent stripping, spaces around CJK characters), remembering where each
 * normalized character came from; the normalized text is split into words by the tokenizer's own
 * pre-tokenizer; then the tokens are walked against the words: "##" pieces continue a word, and
 * [UNK] stands for a whole word. Offsets count Unicode code points, as the Python pipelines do.
 */
import { growingParts } from '../model/truncation.js';

/** What alignment needs of a tokenizer (transformers.js keeps these on its inner tokenizer). */
export interface TokenizerParts {
  normalizer?: { normalize(text: string): string } | null;
  pre_tokenizer?: { pre_tokenize_text(text: string): string[] } | null;
  unknownToken: string;
  continuingPrefix: string;
}

export type Span = [start: number, end: number];

/** The parts of a transformers.js tokenizer that alignment uses (kept on its inner tokenizer). */
export function tokenizerParts(tokenizer: unknown): TokenizerParts {
  const inner = (
    tokenizer as {
      _tokenizer: { model?: { unk_token?: string; continuing_subword_prefix?: string } } & Partial<TokenizerParts>;
    }
  )._tokenizer;
  return {
    normalizer: inner.normalizer,
    pre_tokenizer: inner.pre_tokenizer,
    unknownToken: inner.model?.unk_token ?? '[UNK]',
    continuingPrefix: inner.model?.continuing_subword_prefix ?? '##',
  };
}

/** Start and end (code points, end exclusive) of each token in `text`; null where none can be found. */
export function alignTokens(text: string, tokens: string[], parts: TokenizerParts): Array<Span | null> {
  return alignWords(text, tokens, parts).spans;
}

/** Where tokens and the words they belong to lie in a text (the pre-tokenizer's words, as Python's word_ids). */
export interface Alignment {
  spans: Array<Span | null>;
  /** The word each token belongs to, by index into `wordSpans`; null where unknown. */
  words: Array<number | null>;
  /** Each word's start and end in the text, in code points. */
  wordSpans: Span[];
}

/**
 * Aligns the tokens within the part of the text they cover. Tokens cut from a long text (the first
 * 510 of a megabyte) lie in its first few thousand characters, and normalizing the whole text one
 * code point at a time costs time for all of it: the part read ends where whitespace
 * begins, where no word goes on, and grows fourfold until every token finds its word in it.
 */
export function alignWords(text: string, tokens: string[], parts: TokenizerParts): Alignment {
  for (const head of growingParts(text, Math.max(1024, tokens.length * 16))) {
    const alignment = alignWithin(head, tokens, parts);
    if (alignment.reachedEveryToken) return alignment;
  }
  return alignWithin(text, tokens, parts);
}

function alignWithin(
  text: string,
  tokens: string[],
  parts: TokenizerParts,
): Alignment & { reachedEveryToken: boolean } {
  const original = Array.from(text);
  // The normalized text, one code point per entry, and the original code point each came from.
  const normalized: string[] = [];
  const origin: number[] = [];
  original.forEach((char, i) => {
    for (const c of Array.from(parts.normalizer ? parts.normalizer.normalize(char) : char)) {
      normalized.push(c);
      origin.push(i);
    }
  });
  const joined = normalized.join('');
  const words = parts.pre_tokenizer
    ? parts.pre_tokenizer.pre_tokenize_text(joined)
    : joined.split(/\s+/).filter(Boolean);

  // Where each word starts and ends in `normalized`: found in order, skipping what lies between.
  const wordSpans: Span[] = [];
  let cursor = 0;
  for (const word of words) {
    const chars = Array.from(word);
    let at = cursor;
    while (at < normalized.length && !chars.every((c, k) => normalized[at + k] === c)) at++;
    if (at >= normalized.length) break;
    wordSpans.push([at, at + chars.length]);
    cursor = at + chars.length;
  }

  const spans: Array<Span | null> = [];
  const tokenWords: Array<number | null> = [];
  let word = 0;
  let within = 0;
  let reachedEveryToken = true;
  const toOriginal = (from: number, to: number): Span => [origin[from], origin[to - 1] + 1];
  for (const token of tokens) {
    const span = wordSpans[word];
    if (!span) {
      reachedEveryToken = false;
      spans.push(null);
      tokenWords.push(null);
      continue;
    }
    if (token === parts.unknownToken) {
      spans.push(toOriginal(span[0], span[1]));
      tokenWords.push(word);
      word++;
      within = 0;
      continue;
    }
    const piece = Array.from(
      token.startsWith(parts.continuingPrefix) && within > 0 ? token.slice(parts.continuingPrefix.length) : token,
    );
    const from = span[0] + within;
    const fits =
      piece.length > 0 && from + piece.length <= span[1] && piece.every((c, k) => normalized[from + k] === c);
    if (!fits) {
      // Not a WordPiece split of this word (another tokenizer family): give up on this token only.
      spans.push(null);
      tokenWords.push(null);
      continue;
    }
    spans.push(toOriginal(from, from + piece.length));
    tokenWords.push(word);
    within += piece.length;
    if (span[0] + within >= span[1]) {
      word++;
      within = 0;
    }
  }
  return {
    spans,
    words: tokenWords,
    wordSpans: wordSpans.map(([from, to]) => toOriginal(from, to)),
    reachedEveryToken,
  };
}

/** The original text between two code-point offsets, walking only as far as `end` (not the whole text, once per entity). */
export function sliceCodePoints(text: string, [start, end]: Span): string {
  let at = 0;
  let from = start === 0 ? 0 : -1;
  for (let point = 0; point < end && at < text.length; point++) {
    at += text.codePointAt(at)! > 0xffff ? 2 : 1;
    if (point + 1 === start) from = at;
  }
  return from < 0 ? '' : text.slice(from, at);
}

/**
 * Slices of one text by code-point offsets, as `sliceCodePoints` cuts them, each in the time of its
 * own length once the text has been read once: question answering cuts thousands of candidate
 * answers from one long context, and a walk from its start for each held a worker's event loop
 * past its heartbeats (bench/HISTORY.md, figures moved from code).
 */
export function codePointSlicer(text: string): (span: Span) => string {
  // Without surrogates, code points are UTF-16 code units.
  if (!/[\uD800-\uDFFF]/.test(text)) return ([start, end]) => text.slice(start, end);
  const unitAt = new Uint32Array(text.length + 1);
  let points = 0;
  for (let at = 0; at < text.length; points++) {
    unitAt[points] = at;
    at += text.codePointAt(at)! > 0xffff ? 2 : 1;
  }
  unitAt[points] = text.length;
  return ([start, end]) => text.slice(unitAt[Math.min(start, points)], unitAt[Math.min(end, points)]);
}
