/**
 * Texts the tests and the benchmarks send: words of one plain review, which every replica's
 * tokenizer reads as ordinary words (about a token each).
 */

// A plain review, so the tokenizer sees ordinary words (bench/lib/texts.ts crafts exact token counts from it).
export const PROSE = `the film opens with a quiet scene in a small town where a family is getting ready for a long
winter and the story moves slowly at first but the acting is strong and the music stays with you long after
the end . the director takes time with each character , and while some parts run too long the final hour
is honest , warm and often very funny . it is not a perfect movie but it is one i would watch again with
friends on a cold night , and i think most people will find something to love in it .`
  .split(/\s+/)
  .filter(Boolean);

/**
 * The varied load: `count` texts of `minWords` to `maxWords` words of the prose, lengths drawn
 * evenly from a seeded generator, so that every run (and every side of an A/B) sends the same texts
 * in the same order. A text of n words of it is about n + 2 tokens long.
 */
export function variedTexts(count: number, minWords = 1, maxWords = 400, seed = 1): string[] {
  let state = seed >>> 0;
  // mulberry32: small, seeded, evenly spread.
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
  return Array.from({ length: count }, () => {
    const words = minWords + Math.floor(next() * (maxWords - minWords + 1));
    const start = Math.floor(next() * PROSE.length);
    return Array.from({ length: words }, (_, i) => PROSE[(start + i) % PROSE.length]).join(' ');
  });
}
