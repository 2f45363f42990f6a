import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { compactVector, EMBEDDING_TYPES } from '../../apps/gateway/src/serving/compact-vectors.ts';

/** Debian's python3-numpy installs for the system Python. */
const PYTHON = fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';
const SCRIPT = path.join(import.meta.dirname, '../helpers/compact-reference.py');

/** Each type's vectors as numpy computes them (test/helpers/compact-reference.py). */
function numpyReference(vectors: number[][]): Record<string, unknown[]> {
  return JSON.parse(execFileSync(PYTHON, [SCRIPT], { input: JSON.stringify(vectors), encoding: 'utf8' }));
}

describe('compact vectors', () => {
  // Values at the edges of each mapping, beyond [-1, 1], exactly halfway between two integers, and
  // a length that is not a multiple of eight (a padded last byte).
  const edges = [1, -1, 0, 1.5, -3, 0.5 / 127, -0.5 / 127, 1 / 255, -1 / 255, 0.999, -0.999, 1e-9];
  let seed = 7;
  const random = () => ((seed = (seed * 16807) % 2147483647) / 2147483647) * 2 - 1;
  const vectors = [
    edges,
    Array.from({ length: 384 }, () => random() * 0.2),
    Array.from({ length: 17 }, () => random()),
    [0.6, -0.8],
  ];

  it('equals numpy on every type, bit for bit', () => {
    const reference = numpyReference(vectors);
    for (const type of EMBEDDING_TYPES) {
      assert.deepEqual(
        vectors.map((v) => compactVector(v, type)),
        reference[type],
        type,
      );
    }
  });

  it('packs signs first value highest, pads the last byte, and keeps ranges', () => {
    assert.deepEqual(compactVector([1, -1, 1, 0, 0, 0, 0, 1, 1], 'ubinary'), [0b10100001, 0b10000000]);
    assert.deepEqual(compactVector([1, -1, 1, 0, 0, 0, 0, 1, 1], 'binary'), [0b10100001 - 128, 0]);
    assert.deepEqual(compactVector([1, -1, 0, 2], 'int8'), [127, -127, 0, 127]);
    assert.deepEqual(compactVector([1, -1, 0, -2], 'uint8'), [255, 0, 128, 0]);
  });

  it('never depends on batch mates: a vector alone answers as it does among others', () => {
    for (const type of EMBEDDING_TYPES)
      assert.deepEqual(compactVector(vectors[1], type), compactVector([...vectors[1]], type), type);
  });
});
