import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { QueuedRequest } from '@tserve/contract';
import { workOfDirect } from '../../apps/worker/src/work.ts';

const request = (id: string): QueuedRequest => ({ id, inputs: ['a text'], parameters: {}, deadline: 2_000_000_000_000, enqueuedAt: 1 });

describe('workOfDirect', () => {
  it('reads an entry of several requests under its own id', () => {
    const work = workOfDirect({ id: 'a', requests: [request('a'), request('b')], replyTo: 'gw', keepMs: 10_000 });
    assert.deepEqual(
      { id: work.id, requests: work.requests.map((r) => r.id), replyTo: work.replyTo, tellTaken: work.tellTaken, bulk: work.bulk, keepMs: work.keepMs },
      { id: 'a', requests: ['a', 'b'], replyTo: 'gw', tellTaken: true, bulk: false, keepMs: 10_000 },
    );
  });

  it("reads the one-request entry of the release before, under its request's id", () => {
    const work = workOfDirect({ request: request('x'), replyTo: 'gw', keepMs: 5000 });
    assert.deepEqual({ id: work.id, requests: work.requests.map((r) => r.id), keepMs: work.keepMs }, { id: 'x', requests: ['x'], keepMs: 5000 });
  });
});
