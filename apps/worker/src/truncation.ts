/**
 * How many tokens of each text of a pair are kept so that both fit `budget` (the model's length
 * less the special tokens), as Hugging Face tokenizers cut pairs:
 * - `longest_first` cuts the longer text first; when both are too long, each keeps half;
 * - `only_first` / `only_second` cut one text and fail when that is not enough.
 */
export type PairTruncation = 'longest_first' | 'only_first' | 'only_second';

export function pairLengths(first: number, second: number, budget: number, strategy: PairTruncation): [number, number] | undefined {
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
