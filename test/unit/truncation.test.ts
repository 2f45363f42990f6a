import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { AutoTokenizer } from '@huggingface/transformers';
import { splitsAtWhitespace, tokenBoundaries, tokensForCut } from '../../apps/worker/src/model/truncation.ts';
import { Engine } from '../../apps/worker/src/model/engine.ts';
import type { LoadedModel } from '../../apps/worker/src/model/model.ts';
import { EventEmitter } from 'node:events';
import type { Worker } from 'node:worker_threads';
import { MODEL_DIR } from '../helpers/processes.ts';
import { CLASSIFIER } from '../helpers/replicas.ts';

/** The kept tokens of a cut, as the whole text's tokens give them. */
const keptOf = (tokens: string[], keep: number, direction: 'right' | 'left') =>
  direction === 'right' ? tokens.slice(0, keep) : tokens.slice(-keep);

describe('tokensForCut (a long text read only as far as its cut)', () => {
  const words = (text: string) => text.split(/\s+/).filter(Boolean);

  it('keeps the same tokens as the whole text, having read a few tens of thousands of characters of a megabyte', () => {
    const text = Array.from({ length: 150_000 }, (_, i) => `w${i}${i % 7 === 0 ? '\n\n' : ' '}`)
      .join('')
      .slice(0, 1_000_000);
    for (const direction of ['right', 'left'] as const) {
      let read = 0;
      const { tokens, whole } = tokensForCut(text, 510, direction, (part) => ((read += part.length), words(part)));
      assert.equal(whole, false);
      assert.ok(read < 25_000, `read ${read} characters`);
      assert.deepEqual(keptOf(tokens, 510, direction), keptOf(words(text), 510, direction));
    }
  });

  it('reads a text with no whitespace to cut at, or one too short to pay, whole', () => {
    for (const text of ['x'.repeat(100_000), 'a b c']) {
      let read = 0;
      const { whole } = tokensForCut(text, 20, 'right', (part) => ((read += part.length), words(part)));
      assert.equal(whole, true);
      assert.equal(read, text.length);
    }
  });

  it('reads on, fourfold, past whitespace that holds too few tokens', () => {
    // Ten thousand spaces, then words: the first parts hold nothing.
    const text = `${' '.repeat(10_000)}${Array.from({ length: 5000 }, (_, i) => `w${i}`).join(' ')}`;
    const { tokens, whole } = tokensForCut(text, 100, 'right', words);
    assert.equal(whole, false);
    assert.deepEqual(tokens.slice(0, 100), words(text).slice(0, 100));
  });

  it("keeps exactly the whole text's tokens with a real WordPiece tokenizer, either way, whatever the whitespace", async () => {
    const tokenizer = await AutoTokenizer.from_pretrained(path.join(MODEL_DIR, CLASSIFIER));
    const inner = (
      tokenizer as unknown as {
        _tokenizer: { encode_text(t: string): string[]; tokenizer: Parameters<typeof tokenBoundaries>[0] };
      }
    )._tokenizer;
    const boundary = tokenBoundaries(inner.tokenizer)!;
    assert.ok(boundary('中'.charCodeAt(0)), "BERT's normalizer spaces CJK ideographs");
    assert.ok(boundary('!'.charCodeAt(0)) && boundary('«'.charCodeAt(0)), "BERT's pre-tokenizer isolates punctuation");
    const pieces = (text: string) => inner.encode_text(text) ?? [];
    const samples = [
      'The café in Zürich serves naïve crème brûlée; isn\'t that "fine"?',
      'tab\tseparated\tcolumns\r\nand CRLF lines',
      '中文字 mixed 和 English words 😀 emoji,',
      'multiple     spaces   and\n\n\nblank lines',
      'punctuation!!! (parentheses) [brackets] {braces} 3.14159 1,000,000',
      '東京は日本の首都です。北京是中国的首都。',
    ];
    let seed = 7;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const text = Array.from({ length: 4000 }, () => samples[Math.floor(random() * samples.length)]).join(
      random() < 0.5 ? ' ' : '\n',
    );
    // And Chinese and Japanese with no whitespace at all: cut before an ideograph.
    const cjk = Array.from({ length: 3000 }, () => samples[samples.length - 1]).join('');
    // And words and punctuation with no whitespace: cut before a punctuation character.
    const marks = [
      '!',
      '...',
      ',',
      '«',
      '»',
      '¿',
      '—',
      '$',
      '@',
      '#',
      "'",
      'é',
      'don',
      't',
      '3.14',
      'Zürich',
      '\u0301',
    ];
    const dense = Array.from({ length: 30_000 }, () => marks[Math.floor(random() * marks.length)]).join('');
    for (const long of [text, cjk, dense, '!'.repeat(100_000)]) {
      const whole = pieces(long);
      for (const keep of [30, 126, 510]) {
        for (const direction of ['right', 'left'] as const) {
          const cut = tokensForCut(long, keep, direction, pieces, boundary);
          assert.equal(cut.whole, false);
          assert.ok(cut.tokens.length < whole.length / 4);
          assert.deepEqual(
            keptOf(cut.tokens, keep, direction),
            keptOf(whole, keep, direction),
            `${long.slice(0, 8)} ${direction} ${keep}`,
          );
        }
      }
    }
  });
});

describe('tokenBoundaries (where a tokenizer always ends a token)', () => {
  const space = ' '.charCodeAt(0);
  const ideograph = '中'.charCodeAt(0);
  it("is whitespace for a whitespace-splitting pre-tokenizer, punctuation too for BERT's, CJK ideographs under BERT's normalizer, and nothing known otherwise", () => {
    const bert = tokenBoundaries({
      pre_tokenizer: { type: 'BertPreTokenizer' },
      normalizer: { type: 'BertNormalizer', handle_chinese_chars: true },
    })!;
    assert.deepEqual(
      [bert(space), bert(ideograph), bert('a'.charCodeAt(0)), bert('.'.charCodeAt(0)), bert('$'.charCodeAt(0))],
      [true, true, false, true, true],
    );
    assert.deepEqual(
      [bert('¡'.charCodeAt(0)), bert('、'.charCodeAt(0)), bert('é'.charCodeAt(0)), bert('€'.charCodeAt(0))],
      [true, true, false, false],
      'Unicode P, not S or letters',
    );
    const plain = tokenBoundaries({
      pre_tokenizer: { type: 'BertPreTokenizer' },
      normalizer: { type: 'BertNormalizer', handle_chinese_chars: false },
    })!;
    assert.deepEqual([plain(space), plain(ideograph)], [true, false]);
    // Other pre-tokenizers keep runs of punctuation together ("!!!" is one piece): no boundary there.
    const whitespace = tokenBoundaries({ pre_tokenizer: { type: 'Whitespace' } })!;
    assert.deepEqual([whitespace(space), whitespace('!'.charCodeAt(0))], [true, false]);
    assert.equal(tokenBoundaries({ pre_tokenizer: { type: 'Split' } }), undefined);
    assert.equal(tokenBoundaries(undefined), undefined);
  });
});

describe('splitsAtWhitespace (tokenizers whose tokens end where whitespace begins)', () => {
  it('knows the whitespace-splitting pre-tokenizers, and trusts no other', () => {
    for (const type of ['BertPreTokenizer', 'Whitespace', 'WhitespaceSplit', 'ByteLevel', 'Metaspace'])
      assert.equal(splitsAtWhitespace({ type }), true, type);
    assert.equal(splitsAtWhitespace({ type: 'ByteLevel', use_regex: false }), false);
    assert.equal(splitsAtWhitespace({ type: 'Metaspace', split: false }), false);
    assert.equal(
      splitsAtWhitespace({ type: 'Sequence', pretokenizers: [{ type: 'Digits' }, { type: 'WhitespaceSplit' }] }),
      true,
    );
    assert.equal(
      splitsAtWhitespace({
        type: 'Sequence',
        pretokenizers: [{ type: 'Split' }, { type: 'ByteLevel', use_regex: false }],
      }),
      false,
    );
    assert.equal(splitsAtWhitespace({ type: 'Split' }), false);
    assert.equal(splitsAtWhitespace(null), false);
  });
});

describe('Engine: cut texts and pairs read in part give the sequences of texts read whole', () => {
  /** Two engines on one tokenizer: one reads only what a cut keeps, the other (its pre-tokenizer hidden) reads every text whole. */
  async function engines() {
    const tokenizer = await AutoTokenizer.from_pretrained(path.join(MODEL_DIR, CLASSIFIER));
    const inner = (tokenizer as unknown as { _tokenizer: { tokenizer: object } })._tokenizer;
    const wholeInner = Object.create(inner, {
      tokenizer: { value: { ...inner.tokenizer, pre_tokenizer: null } },
    }) as object;
    const wholeTokenizer = Object.create(tokenizer, { _tokenizer: { value: wholeInner } }) as typeof tokenizer;
    const loaded = (t: typeof tokenizer) => ({ tokenizer: t, maxLength: 512 }) as unknown as LoadedModel;
    let pieces = 0;
    const parts = new Engine(loaded(tokenizer), new EventEmitter() as unknown as Worker);
    const counted = parts.pieces.bind(parts);
    parts.pieces = (text) => ((pieces += text.length), counted(text));
    return {
      parts,
      whole: new Engine(loaded(wholeTokenizer), new EventEmitter() as unknown as Worker),
      charsRead: () => pieces,
    };
  }

  const words = (n: number, word: string) => Array.from({ length: n }, (_, i) => `${word}${i % 10}`).join(' ');
  const texts = {
    short: 'a short text of a few words',
    long: words(1500, 'long'),
    longer: words(2000, 'longer'),
    sameAsLong: words(1500, 'other'),
    noSpaces: '中文字'.repeat(1000),
    // Nowhere to cut (no whitespace, no ideograph), many tokens: read whole.
    noBoundary: 'a.'.repeat(4500),
  };

  it('single texts, either direction', async () => {
    const { parts, whole, charsRead } = await engines();
    for (const text of Object.values(texts)) {
      for (const direction of ['right', 'left'] as const) {
        const got = parts.encode(text, { truncate: true, direction });
        const want = whole.encode(text, { truncate: true, direction });
        assert.deepEqual(got.ids, want.ids);
        assert.ok(
          got.truncatedFrom?.atLeast
            ? got.truncatedFrom.tokens <= want.truncatedFrom!.tokens
            : got.truncatedFrom?.tokens === want.truncatedFrom?.tokens,
        );
      }
    }
    // A question's first tokens (question answering's max_question_len).
    for (const text of Object.values(texts))
      assert.deepEqual(parts.leadingPieces(text, 64), whole.pieces(text).slice(0, 64));
    const before = charsRead();
    parts.encode(texts.longer, true);
    assert.ok(
      charsRead() - before < texts.longer.length / 3,
      `read ${charsRead() - before} characters of ${texts.longer.length}`,
    );
  });

  it('pairs, for every strategy and direction, and reads a first text shared by pairs once', async () => {
    const { parts, whole, charsRead } = await engines();
    for (const first of Object.values(texts)) {
      for (const second of Object.values(texts)) {
        for (const strategy of ['longest_first', 'only_first', 'only_second'] as const) {
          for (const direction of ['right', 'left'] as const) {
            const got = parts.encodePair(first, second, strategy, direction);
            const want = whole.encodePair(first, second, strategy, direction);
            const what = `${first.slice(0, 8)} | ${second.slice(0, 8)} ${strategy} ${direction}`;
            assert.deepEqual([got.ids, got.typeIds], [want.ids, want.typeIds], what);
            assert.ok(
              got.truncatedFrom?.atLeast
                ? got.truncatedFrom.tokens <= want.truncatedFrom!.tokens
                : got.truncatedFrom?.tokens === want.truncatedFrom?.tokens,
              what,
            );
          }
        }
      }
    }
    // Not cut: both read whole.
    for (const direction of ['right', 'left'] as const)
      assert.deepEqual(
        parts.encodePair(texts.long, texts.longer, false, direction),
        whole.encodePair(texts.long, texts.longer, false, direction),
      );
    // Zero-shot: one input, a hypothesis per label; the input, with no whitespace to cut at, read once.
    const before = charsRead();
    for (let label = 0; label < 20; label++)
      parts.encodePair(texts.noSpaces, `This example is label ${label}.`, 'only_first');
    assert.ok(
      charsRead() - before < 2 * texts.noSpaces.length,
      `read ${charsRead() - before} characters for 20 pairs of a ${texts.noSpaces.length}-character input`,
    );
  });
});
