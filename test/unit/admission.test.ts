import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ApiError } from '@tserve/contract';
import {
  BodyBudget,
  Overload,
  QueueDepth,
  depthLimit,
  depthRefusal,
  sizeRefusal,
  type OverloadLimits,
} from '../../apps/gateway/src/admission/overload.ts';
import { Admission } from '../../apps/gateway/src/admission/admission.ts';
import type { BreakerState, RedisBreaker } from '../../apps/gateway/src/admission/breaker.ts';

const limits: OverloadLimits = { maxQueueDepth: 10, batchQueueShare: 0.5, maxInputsPerRequest: 8 };

/** A breaker whose state the test sets; it never calls Redis. */
function fakeBreaker(
  state: BreakerState = 'closed',
): RedisBreaker & { state(): BreakerState; set(s: BreakerState): void } {
  let current = state;
  return {
    guard: (call) => call(),
    state: () => current,
    refusal: () => (current === 'open' ? new ApiError('unavailable', 'breaker open', 5) : undefined),
    cause: () => undefined,
    reconnected: () => {},
    set: (s) => (current = s),
  };
}

/** A depth whose exchange answers with the given peers' counts and records what it was told. */
function depthWithPeers(peers: Record<string, number> = {}) {
  const told: Array<Map<string, number>> = [];
  const depth = new QueueDepth({
    exchange: async (mine) => {
      told.push(new Map(mine));
      return new Map(Object.entries(peers));
    },
  });
  return { depth, told };
}

describe('overload limits', () => {
  it('refuses the batch class first, at BATCH_QUEUE_SHARE of the depth', () => {
    assert.equal(depthLimit(limits, 'interactive'), 10);
    assert.equal(depthLimit(limits, 'batch'), 5);
    assert.equal(depthRefusal(limits, 'm', 4, 'batch'), undefined);
    const batch = depthRefusal(limits, 'm', 5, 'batch');
    assert.equal(batch?.type, 'overloaded');
    assert.equal(batch?.status, 503);
    assert.equal(batch?.retryAfterSeconds, 1);
    assert.match(batch.message, /model m has 5 requests waiting \(batch class refused first\)/);
    assert.equal(depthRefusal(limits, 'm', 9, 'interactive'), undefined);
    assert.match(
      depthRefusal(limits, 'm', 10, 'interactive')!.message,
      /^model m has 10 requests waiting; retry shortly$/,
    );
  });

  it('rounds the batch share down, so a share of a small depth can be none', () => {
    assert.equal(depthLimit({ ...limits, maxQueueDepth: 1 }, 'batch'), 0);
    assert.ok(depthRefusal({ ...limits, maxQueueDepth: 1 }, 'm', 0, 'batch'));
  });

  it('caps inputs and model sequences per request with a 413 that says which', () => {
    assert.equal(sizeRefusal(limits, 8, 8), undefined);
    const inputs = sizeRefusal(limits, 9, 9);
    assert.equal(inputs?.status, 413);
    assert.match(inputs.message, /^9 inputs in one request; at most 8/);
    const sequences = sizeRefusal(limits, 2, 12);
    assert.equal(sequences?.type, 'payload_too_large');
    assert.match(sequences.message, /^12 model sequences \(2 input\(s\) × their pairs, labels or sentences\)/);
  });
});

describe('body budget', () => {
  it('counts bytes as they arrive, releases each hold once, and always lets a lone body in', () => {
    const budget = new BodyBudget(100);
    const a = budget.hold();
    const b = budget.hold();
    assert.equal(budget.held, 0, 'a hold counts nothing until bytes arrive: a declared size is no bytes');
    assert.ok(a.add(30) && a.add(30));
    assert.equal(b.add(41), false, '60 + 41 is over 100');
    assert.ok(b.add(40), '60 + 40 fits');
    assert.ok(budget.full);
    a.release();
    a.release();
    assert.equal(budget.held, 40, 'a second release of the same hold frees nothing');
    const lone = new BodyBudget(10).hold();
    assert.ok(lone.add(500), 'a body larger than the budget enters when nothing else is held');
    assert.ok(lone.add(500), '...and goes on arriving');
    assert.equal(budget.refusal().status, 503);
    assert.match(budget.refusal().message, /holds 0.0 MB of request bodies, its most \(MAX_BODIES_BYTES\)/);
  });
});

describe('queue depth', () => {
  it('counts each admitted request until it leaves, once', () => {
    const { depth } = depthWithPeers();
    const leaveA = depth.enter('m');
    const leaveB = depth.enter('m');
    assert.equal(depth.of('m'), 2);
    leaveA();
    leaveA();
    assert.equal(depth.of('m'), 1, 'a second leave changes nothing');
    leaveB();
    assert.equal(depth.of('m'), 0);
  });

  it('adds what the other gateways report, and reports its own zeros too', async () => {
    const { depth, told } = depthWithPeers({ m: 3 });
    depth.enter('m');
    await depth.share(['m', 'idle']);
    assert.deepEqual(
      [...told[0]],
      [
        ['m', 1],
        ['idle', 0],
      ],
    );
    assert.equal(depth.of('m'), 4);
    assert.equal(depth.of('idle'), 0);
  });
});

describe('admission after the body', () => {
  const admission = (breaker = fakeBreaker(), served = (_: string) => true) => {
    const { depth } = depthWithPeers();
    return {
      depth,
      breaker,
      admission: new Admission({
        overload: new Overload(limits, depth, { has: served }),
        bodies: { budget: new BodyBudget(1000) },
        breaker,
        requestTimeoutMs: 1000,
      }),
    };
  };
  const refusedWith = (check: () => void) => {
    try {
      check();
    } catch (err) {
      assert.ok(err instanceof ApiError);
      return err.type;
    }
    return 'admitted';
  };

  it('admits a request within every limit', () => {
    const { admission: a } = admission();
    assert.equal(
      refusedWith(() => a.afterBody('m', 'interactive', { inputs: 1, sequences: 1 })),
      'admitted',
    );
  });

  it('refuses in order: too large, then queue full, then breaker open', () => {
    const { admission: a, depth, breaker } = admission(fakeBreaker('open'));
    for (let i = 0; i < 10; i++) depth.enter('m');
    assert.equal(
      refusedWith(() => a.afterBody('m', 'interactive', { inputs: 9, sequences: 9 })),
      'payload_too_large',
    );
    assert.equal(
      refusedWith(() => a.afterBody('m', 'interactive', { inputs: 1, sequences: 1 })),
      'overloaded',
    );
    assert.equal(
      refusedWith(() => a.afterBody('other', 'interactive', { inputs: 1, sequences: 1 })),
      'unavailable',
    );
    breaker.set('closed');
    assert.equal(
      refusedWith(() => a.afterBody('other', 'interactive', { inputs: 1, sequences: 1 })),
      'admitted',
    );
  });

  it('sheds batch before interactive as the queue fills', () => {
    const { admission: a, depth } = admission();
    const leaves = Array.from({ length: 5 }, () => a.enter('m'));
    assert.equal(
      refusedWith(() => a.afterBody('m', 'batch', { inputs: 1, sequences: 1 })),
      'overloaded',
    );
    assert.equal(
      refusedWith(() => a.afterBody('m', 'interactive', { inputs: 1, sequences: 1 })),
      'admitted',
    );
    leaves[0]();
    assert.equal(depth.of('m'), 4);
    assert.equal(
      refusedWith(() => a.afterBody('m', 'batch', { inputs: 1, sequences: 1 })),
      'admitted',
    );
  });

  it('admits a request sent as pieces only where the queue has room for each piece', () => {
    const { admission: a, depth } = admission();
    for (let i = 0; i < 5; i++) depth.enter('m');
    // limits.maxQueueDepth is 10: five waiting leave room for five more requests, or pieces.
    assert.equal(
      refusedWith(() => a.afterBody('m', 'interactive', { inputs: 5, sequences: 5, pieces: 5 })),
      'admitted',
    );
    assert.equal(
      refusedWith(() => a.afterBody('m', 'interactive', { inputs: 6, sequences: 6, pieces: 6 })),
      'overloaded',
    );
  });

  it('does not call a model overloaded that no worker serves (routing says why instead)', () => {
    const { admission: a, depth } = admission(fakeBreaker(), () => false);
    for (let i = 0; i < 10; i++) depth.enter('gone');
    assert.equal(
      refusedWith(() => a.afterBody('gone', 'interactive', { inputs: 1, sequences: 1 })),
      'admitted',
    );
  });

  it('explains a failed enqueue by its cause, or by the breaker when it is open', () => {
    const breaker = fakeBreaker();
    const { admission: a } = admission(breaker);
    assert.match(a.enqueueFailure(new Error('Command timed out')).message, /Redis is not answering/);
    assert.match(a.enqueueFailure(new Error('connect ECONNREFUSED 127.0.0.1:1')).message, /Redis is unreachable/);
    assert.match(
      a.enqueueFailure(new Error("OOM command not allowed when used memory > 'maxmemory'.")).message,
      /Redis is out of memory/,
    );
    breaker.set('open');
    assert.equal(a.enqueueFailure(new Error('Command timed out')).message, 'breaker open');
  });
});
