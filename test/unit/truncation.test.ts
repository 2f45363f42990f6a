import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { AutoTokenizer } from '@huggingface/transformers';
import { splitsAtWhitespace, tokensForCut } from '../../apps/worker/src/truncation.ts';
import { MODEL_DIR } from '../helpers/processes.ts';
import { CLASSIFIER } from '../helpers/replicas.ts';

/** The kept tokens of a cut, as the whole text's tokens give them. */
const keptOf = (tokens: string[], keep: number, direction: 'right' | 'left') => (direction === 'right' ? tokens.slice(0, keep) : tokens.slice(-keep));

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
    const inner = (tokenizer as unknown as { _tokenizer: { encode_text(t: string): string[]; tokenizer: { pre_tokenizer: { type: string } } } })._tokenizer;
    assert.ok(splitsAtWhitespace(inner.tokenizer.pre_tokenizer));
    const pieces = (text: string) => inner.encode_text(text) ?? [];
    const samples = [
      'The café in Zürich serves naïve crème brûlée; isn\'t that "fine"?',
      'tab\tseparated\tcolumns\r\nand CRLF lines',
      '中文字 mixed 和 English words 😀 emoji,',
      'multiple     spaces   and\n\n\nblank lines',
      'punctuation!!! (parentheses) [brackets] {braces} 3.14159 1,000,000',
    ];
    let seed = 7;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const text = Array.from({ length: 4000 }, () => samples[Math.floor(random() * samples.length)]).join(random() < 0.5 ? ' ' : '\n');
    const whole = pieces(text);
    for (const keep of [30, 126, 510]) {
      for (const direction of ['right', 'left'] as const) {
        const cut = tokensForCut(text, keep, direction, pieces);
        assert.equal(cut.whole, false);
        assert.ok(cut.tokens.length < whole.length / 4);
        assert.deepEqual(keptOf(cut.tokens, keep, direction), keptOf(whole, keep, direction), `${direction} ${keep}`);
      }
    }
  });
});

describe('splitsAtWhitespace (tokenizers whose tokens end where whitespace begins)', () => {
  it('knows the whitespace-splitting pre-tokenizers, and trusts no other', () => {
    for (const type of ['BertPreTokenizer', 'Whitespace', 'WhitespaceSplit', 'ByteLevel', 'Metaspace']) assert.equal(splitsAtWhitespace({ type }), true, type);
    assert.equal(splitsAtWhitespace({ type: 'ByteLevel', use_regex: false }), false);
    assert.equal(splitsAtWhitespace({ type: 'Metaspace', split: false }), false);
    assert.equal(splitsAtWhitespace({ type: 'Sequence', pretokenizers: [{ type: 'Digits' }, { type: 'WhitespaceSplit' }] }), true);
    assert.equal(splitsAtWhitespace({ type: 'Sequence', pretokenizers: [{ type: 'Split' }, { type: 'ByteLevel', use_regex: false }] }), false);
    assert.equal(splitsAtWhitespace({ type: 'Split' }), false);
    assert.equal(splitsAtWhitespace(null), false);
  });
});
