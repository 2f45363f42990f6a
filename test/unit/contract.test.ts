import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ApiError, decodeJobFailure, encodeJobFailure } from '@tserve/contract';

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
