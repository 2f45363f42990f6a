import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  alignTokens,
  codePointSlicer,
  sliceCodePoints,
  type TokenizerParts,
} from '../../apps/worker/src/tasks/offsets.ts';

/** A BERT-like normalizer (lower-case, strip accents, space around CJK) and a whitespace/punctuation pre-tokenizer. */
const bertLike: TokenizerParts = {
  normalizer: {
    normalize: (text) =>
      text
        .normalize('NFD')
        .replace(/\p{Mn}/gu, '')
        .toLowerCase()
        .replace(/(\p{Script=Han})/gu, ' $1 '),
  },
  pre_tokenizer: { pre_tokenize_text: (text) => text.match(/[\p{L}\p{N}\p{So}]+|[^\s\p{L}\p{N}\p{So}]/gu) ?? [] },
  unknownToken: '[UNK]',
  continuingPrefix: '##',
};

describe('alignTokens', () => {
  it('maps pieces, accents, CJK and unknown words back to code-point spans of the input', () => {
    const text = 'Zoë Müllerx 東京, 😀!';
    const tokens = ['zoe', 'mul', '##ler', '##x', '東', '京', ',', '[UNK]', '!'];
    const spans = alignTokens(text, tokens, bertLike);
    assert.deepEqual(spans, [
      [0, 3],
      [4, 7],
      [7, 10],
      [10, 11],
      [12, 13],
      [13, 14],
      [14, 15],
      [16, 17],
      [17, 18],
    ]);
    assert.equal(sliceCodePoints(text, spans[7]), '😀');
    assert.equal(sliceCodePoints(text, [4, 11]), 'Müllerx');
    assert.equal(sliceCodePoints(text, [0, 3]), 'Zoë');
    assert.equal(sliceCodePoints(text, [16, 18]), '😀!');
    assert.equal(sliceCodePoints(text, [17, 18]), '!');
    assert.equal(sliceCodePoints(text, [5, 5]), '');
    assert.equal(sliceCodePoints(text, [17, 99]), '!');
  });

  it('gives null, not a wrong span, for a token that is no piece of the next word', () => {
    assert.deepEqual(alignTokens('hello world', ['hello', 'planet', 'world'], bertLike), [[0, 5], null, [6, 11]]);
  });

  it('reads only the part of a long text its tokens cover, and aligns as over the whole', () => {
    let normalized = 0;
    const counting: TokenizerParts = {
      ...bertLike,
      normalizer: { normalize: (text) => ((normalized += text.length), bertLike.normalizer!.normalize(text)) },
    };
    const text = Array.from({ length: 200_000 }, (_, i) => `Wörd${i}`).join(' ');
    const words = text.split(' ').slice(0, 510);
    const tokens = words.map((w) => w.toLowerCase().replace('ö', 'o'));
    const spans = alignTokens(text, tokens, counting);
    assert.ok(normalized < 50_000, `normalized ${normalized} characters of ${text.length}`);
    let at = 0;
    assert.deepEqual(
      spans,
      words.map((w) => [at, (at += w.length + 1) - 1]),
    );
    // Tokens to the very end of a text with no whitespace after them: the whole is read.
    assert.deepEqual(alignTokens('a b', ['a', 'b'], bertLike), [
      [0, 1],
      [2, 3],
    ]);
  });

  it('stops where the tokens stop (a truncated input)', () => {
    assert.deepEqual(alignTokens('one two three', ['one', 'two'], bertLike), [
      [0, 3],
      [4, 7],
    ]);
  });
});

describe('codePointSlicer', () => {
  it('cuts every span as sliceCodePoints does, astral characters, lone surrogates and spans past the end included', () => {
    for (const text of ['plain ascii text', 'Zoë 😀 Müller\u{1F600}!', 'x\uDFFF\uD800y 😀', '😀', '']) {
      const slice = codePointSlicer(text);
      const points = Array.from(text).length + 2;
      for (let start = 0; start <= points; start++) {
        for (let end = start; end <= points; end++)
          assert.equal(
            slice([start, end]),
            sliceCodePoints(text, [start, end]),
            `${JSON.stringify(text)} [${start}, ${end}]`,
          );
      }
    }
  });
});
