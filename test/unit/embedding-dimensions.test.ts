import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { shorten } from '../../apps/gateway/src/serving/embedding-dimensions.ts';

describe('embedding dimensions (OpenAI and TEI `dimensions`)', () => {
  const vector = [0.6, 0.8, 0, 0];

  it('keeps the first values and normalises them again', () => {
    assert.deepEqual(shorten([3, 4, 12], 2), [0.6, 0.8]);
    assert.deepEqual(shorten([3, 4, 12], 2, false), [3, 4], 'normalize: false keeps the raw values');
  });

  it('leaves a vector alone when no or all dimensions are asked for, and a zero vector zero', () => {
    assert.equal(shorten(vector, undefined), vector);
    assert.equal(shorten(vector, 4), vector);
    assert.deepEqual(shorten([0, 0, 1], 2), [0, 0]);
  });
});
