import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  ApiError,
  applyScoreFunction,
  decodeJobFailure,
  defaultScoreFunction,
  encodeJobFailure,
} from '@tserve/contract';

describe('job failure text', () => {
  it("round-trips a worker's error with its type", () => {
    const body = new ApiError('inference', 'the model could not run this input').toBody();
    assert.deepEqual(decodeJobFailure(encodeJobFailure(body)), body);
  });

  it("reads BullMQ's own reasons as internal errors that quote them", () => {
    assert.deepEqual(decodeJobFailure('job stalled more than allowable limit'), {
      error: 'the job failed: job stalled more than allowable limit',
      error_type: 'internal',
    });
    assert.equal(decodeJobFailure('{"not":"ours"}').error_type, 'internal');
  });

  it("gives a client-closed request nginx's 499", () => {
    assert.equal(new ApiError('cancelled', 'gone').status, 499);
  });
});

describe('ApiError', () => {
  it('captures no stack (it is an answer, made for every refused request) and leaves the stack limit as it was', () => {
    const limit = Error.stackTraceLimit;
    const error = new ApiError('overloaded', 'model m has 64 requests waiting; retry shortly', 1);
    assert.equal(error.stack?.split('\n').length, 1, error.stack);
    assert.equal(Error.stackTraceLimit, limit);
    assert.ok(error instanceof Error && error.status === 503 && error.retryAfterSeconds === 1);
    assert.ok((new Error('a fault').stack?.split('\n').length ?? 0) > 1, 'other errors keep their stacks');
  });
});

describe('score functions (function_to_apply)', () => {
  it('picks a sigmoid for multi-label and single-logit models, a softmax otherwise, as the HF pipelines do', () => {
    assert.equal(defaultScoreFunction({ id2label: { 0: 'NEGATIVE', 1: 'POSITIVE' } }), 'softmax');
    assert.equal(
      defaultScoreFunction({ id2label: { 0: 'a', 1: 'b' }, problem_type: 'multi_label_classification' }),
      'sigmoid',
    );
    assert.equal(defaultScoreFunction({ id2label: { 0: 'score' } }), 'sigmoid');
    assert.equal(defaultScoreFunction({}), 'softmax');
  });

  it('applies each function to a row of logits', () => {
    const [a, b] = applyScoreFunction('softmax', [0, Math.log(3)]);
    assert.ok(Math.abs(a - 0.25) < 1e-12 && Math.abs(b - 0.75) < 1e-12);
    assert.deepEqual(Array.from(applyScoreFunction('sigmoid', [0])), [0.5]);
    assert.deepEqual(Array.from(applyScoreFunction('none', [-2, 7])), [-2, 7]);
  });
});
