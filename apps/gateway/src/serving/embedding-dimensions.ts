/**
 * Matryoshka shortening of embeddings, as OpenAI's and TEI's `dimensions` ask for it: the first
 * `dimensions` values, normalised again when the full vectors were normalised.
 */
export function shorten(vector: number[], dimensions: number | undefined, normalize = true): number[] {
  if (dimensions === undefined || dimensions === vector.length) return vector;
  const kept = vector.slice(0, dimensions);
  if (!normalize) return kept;
  const norm = Math.hypot(...kept) || 1;
  return kept.map((v) => v / norm);
}
