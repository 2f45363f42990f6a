import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Precedence, PRESENT_MS } from '../../apps/worker/src/pipeline/precedence.ts';

describe('Precedence', () => {
  const clocked = () => {
    let now = 0;
    return { precedence: new Precedence(32, () => now), advance: (ms: number) => (now += ms) };
  };

  it('lets bulk calls run at full size while nothing interactive has run', () => {
    const { precedence } = clocked();
    precedence.bulkRan(32, 320);
    assert.equal(precedence.bulkRows(), 32);
  });

  it('cuts bulk calls to about one interactive call of time while interactive work is present', () => {
    const { precedence } = clocked();
    precedence.bulkRan(32, 320); // 10 ms a row
    precedence.interactiveRan(40);
    assert.equal(precedence.bulkRows(), 4);
    precedence.interactiveRan(5);
    assert.equal(precedence.bulkRows(), 3, 'a running average: one short call moves it a fifth of the way');
  });

  it('never cuts a call below one row, nor lets it above the batch size', () => {
    const { precedence } = clocked();
    precedence.bulkRan(1, 100);
    precedence.interactiveRan(5);
    assert.equal(precedence.bulkRows(), 1);
    const fast = clocked().precedence;
    fast.bulkRan(10, 1);
    fast.interactiveRan(50);
    assert.equal(fast.bulkRows(), 32);
  });

  it('gives bulk calls their full size again once interactive work has been absent a while', () => {
    const { precedence, advance } = clocked();
    precedence.bulkRan(32, 320);
    precedence.interactiveRan(20);
    advance(PRESENT_MS.most);
    assert.equal(precedence.bulkRows(), 2);
    advance(1);
    assert.equal(precedence.bulkRows(), 32);
  });

  it('counts steady interactive traffic as gone soon after it stops', () => {
    const { precedence, advance } = clocked();
    precedence.bulkRan(32, 320);
    for (let i = 0; i < 50; i++) {
      precedence.interactiveRan(20);
      advance(25);
    }
    assert.equal(precedence.bulkRows(), 2, 'present between its calls');
    advance(PRESENT_MS.least - 25);
    assert.equal(precedence.bulkRows(), 2);
    advance(1);
    assert.equal(precedence.bulkRows(), 32, 'a burst that ended leaves the batch its full calls');
  });

  it('counts sparse interactive traffic as present between its requests', () => {
    const { precedence, advance } = clocked();
    precedence.bulkRan(32, 320);
    for (let i = 0; i < 5; i++) {
      precedence.interactiveRan(20);
      advance(2_000);
    }
    advance(5_000);
    assert.equal(precedence.bulkRows(), 2, 'seven seconds after a request that comes every two');
    advance(PRESENT_MS.most);
    assert.equal(precedence.bulkRows(), 32);
  });
});
