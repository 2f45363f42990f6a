/**
 * Compact vectors: an embedding written in fewer bytes, as Cohere's `embedding_types` name them, for
 * the vector databases that store int8 or binary vectors. Cohere's embed route, OpenAI's
 * (`encoding_format`) and TEI's `/embed` (`embedding_type`) answer them alike. Each is a fixed
 * function of one vector: no value depends on the request's other vectors (docs/api/cohere.md).
 */

export const EMBEDDING_TYPES = ['float', 'int8', 'uint8', 'binary', 'ubinary', 'base64'] as const;
export type EmbeddingType = (typeof EMBEDDING_TYPES)[number];

/** A value clamped to [-1, 1]: the range of a normalised vector's values. */
const clamp = (v: number) => Math.min(1, Math.max(-1, v));

/**
 * `[-1, 1]` onto the integers `[-127, 127]` (int8) or `[0, 255]` (uint8), rounding half up:
 * `floor(clamp(v) * 127 + 0.5)` and `floor((clamp(v) + 1) * 127.5 + 0.5)`.
 */
const toInt8 = (v: number) => Math.floor(clamp(v) * 127 + 0.5);
const toUint8 = (v: number) => Math.floor((clamp(v) + 1) * 127.5 + 0.5);

/**
 * The sign bits packed eight to a byte, the first value in the highest bit, a last byte padded
 * with zeros: numpy's `packbits(vector > 0)`, as sentence-transformers' `quantize_embeddings`
 * packs `ubinary`. `binary` is each byte less 128, as a signed byte.
 */
function packSigns(vector: number[], offset: number): number[] {
  const bytes = new Array<number>(Math.ceil(vector.length / 8)).fill(0);
  vector.forEach((v, i) => {
    if (v > 0) bytes[i >> 3] |= 0x80 >> (i & 7);
  });
  return offset ? bytes.map((b) => b - offset) : bytes;
}

/** Little-endian float32 bytes, base64: OpenAI's and Cohere's `base64`. */
function float32Base64(vector: number[]): string {
  return Buffer.from(Float32Array.from(vector).buffer).toString('base64');
}

/** One vector as `type`: numbers, or (`base64`) a string. */
export function compactVector(vector: number[], type: EmbeddingType): number[] | string {
  switch (type) {
    case 'float':
      return vector;
    case 'int8':
      return vector.map(toInt8);
    case 'uint8':
      return vector.map(toUint8);
    case 'ubinary':
      return packSigns(vector, 0);
    case 'binary':
      return packSigns(vector, 128);
    case 'base64':
      return float32Base64(vector);
  }
}
