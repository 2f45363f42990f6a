/** Small numeric helpers shared by the task heads. */

/** Indices of the k largest values, largest first (the first of equal values first). */
export function topK(values: ArrayLike<number>, k: number): number[] {
  if (k >= values.length)
    return Array.from({ length: values.length }, (_, i) => i).sort((a, b) => values[b] - values[a]);
  // The best so far, kept in order by binary insertion: re-sorting them at every newcomer made
  // fill-mask over a whole vocabulary slow for a large top_k (bench/HISTORY.md).
  const best: number[] = [];
  for (let i = 0; i < values.length; i++) {
    if (best.length === k && values[i] <= values[best[k - 1]]) continue;
    let low = 0;
    let high = best.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (values[best[middle]] >= values[i]) low = middle + 1;
      else high = middle;
    }
    best.splice(low, 0, i);
    if (best.length > k) best.pop();
  }
  return best;
}

/** One row of a [batch, ...] output as a view, no copy. */
export function row(data: Float32Array, index: number, size: number): Float32Array {
  return data.subarray(index * size, (index + 1) * size);
}
