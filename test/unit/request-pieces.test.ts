import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { answeredFromJson, inGroups, type ReadRequestOutcome } from '@tserve/contract';
import { joinPieces, pieceId } from '../../apps/gateway/src/serving/request-pieces.ts';

const piece = (id: string, outputs: unknown[], timing = { queue_ms: 1, inference_ms: 2, batch_size: 3 }) =>
  answeredFromJson(
    outputs.map((o) => Buffer.from(JSON.stringify(o))),
    { id, ok: true, warnings: [], timing, tokens: outputs.map(() => 4) },
  );

describe("a large request's pieces", () => {
  it('cuts inputs in order into groups of at most the size, a larger one alone', () => {
    assert.deepEqual(
      inGroups([1, 1, 1, 5, 1, 2, 2], (n) => n, 3),
      [[1, 1, 1], [5], [1, 2], [2]],
    );
    assert.deepEqual(
      inGroups([], (n: number) => n, 3),
      [],
    );
  });

  it('gives each piece an id of its own under the request', () => {
    assert.equal(pieceId('abc', 0), 'abc-piece1');
    assert.notEqual(pieceId('abc', 1), pieceId('abc', 0));
  });

  it("joins the pieces' outputs in order, as their workers wrote them, with their timing and tokens", () => {
    const joined = joinPieces([
      piece('r-piece1', [[1], [2]], { queue_ms: 5, inference_ms: 10, batch_size: 2 }),
      piece('r-piece2', [[3]], { queue_ms: 9, inference_ms: 4, batch_size: 1 }),
    ]);
    assert.ok(joined.ok);
    assert.equal(joined.id, 'r-piece1');
    assert.deepEqual(joined.outputs, [[1], [2], [3]]);
    assert.deepEqual(joined.outputsJson?.map(String), ['[1]', '[2]', '[3]']);
    assert.deepEqual(joined.timing, { queue_ms: 9, inference_ms: 14, batch_size: 2 });
    assert.deepEqual(joined.tokens, [4, 4, 4]);
  });

  it("answers the first refused piece's error", () => {
    const refused: ReadRequestOutcome = {
      id: 'r-piece2',
      ok: false,
      error: { error: 'input 3 is too long', error_type: 'payload_too_large' },
    };
    const joined = joinPieces([piece('r-piece1', [[1]]), refused, { ...refused, id: 'r-piece3' }]);
    assert.equal(joined.ok, false);
    assert.deepEqual(!joined.ok && joined.error, refused.error);
  });
});
