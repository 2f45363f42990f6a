import assert from 'node:assert/strict';

/**
 * Two answers compared as a client would hold them the same: everything but their numbers equal
 * exactly (labels, tokens, shapes), and each number within a tolerance.
 */

/** The numbers of an answer, in order, and everything else it says, to be equal exactly. */
function split(answer: unknown): { numbers: number[]; rest: string } {
  const numbers: number[] = [];
  const rest = JSON.stringify(answer, (_key, value) => {
    if (typeof value !== 'number' || Number.isInteger(value)) return value;
    numbers.push(value);
    return 0;
  });
  return { numbers, rest };
}

/** How far apart two answers are: whether all but their numbers match, and the largest difference of a number. */
export function compareAnswers(a: unknown, b: unknown): { same: boolean; largest: number } {
  const [x, y] = [split(a), split(b)];
  const same = x.rest === y.rest && x.numbers.length === y.numbers.length;
  return {
    same,
    largest: same ? Math.max(0, ...x.numbers.map((v, i) => Math.abs(v - y.numbers[i]))) : Number.POSITIVE_INFINITY,
  };
}

export function assertSameAnswer(alone: unknown, other: unknown, how: string, tolerance: number): void {
  const { same, largest } = compareAnswers(alone, other);
  assert.ok(same, `${how}: labels, tokens or shapes differ: ${JSON.stringify(alone)} vs ${JSON.stringify(other)}`);
  assert.ok(largest <= tolerance, `${how}: a number differs by ${largest}`);
}
