/** Small numeric helpers shared by the task heads. */

/** Indices of the k largest values, largest first. */
export function topK(values: ArrayLike<number>, k: number): number[] {
  const idx = Array.from({ length: values.length }, (_, i) => i);
  if (k >= values.length) return idx.sort((a, b) => values[b] - values[a]);
  // Partial selection keeps fill-mask over a 30k vocabulary cheap.
  const best: number[] = [];
  for (let i = 0; i < values.length; i++) {
    if (best.length < k) {
      best.push(i);
      best.sort((a, b) => values[b] - values[a]);
    } else if (values[i] > values[best[k - 1]]) {
      best[k - 1] = i;
      best.sort((a, b) => values[b] - values[a]);
    }
  }
  return best;
}

/** One row of a [batch, ...] output as a view, no copy. */
export function row(data: Float32Array, index: number, size: number): Float32Array {
  return data.subarray(index * size, (index + 1) * size);
}
