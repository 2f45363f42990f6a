import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AnswerBuffer, Slots } from '../../apps/gateway/src/offline/in-flight.ts';
import type { LineAnswer } from '../../apps/gateway/src/offline/batches.ts';

const answer = (index: number): LineAnswer => ({ index, line: `{"i":${index}}`, ok: true });

describe("a running batch's lines in flight", () => {
  it('holds at most its size of lines; a slot given back goes to the first waiting; drained waits for all', async () => {
    const slots = new Slots(2);
    assert.equal(slots.take(), undefined);
    assert.equal(slots.take(), undefined);
    const order: number[] = [];
    const third = slots.take()!.then(() => order.push(3));
    const fourth = slots.take()!.then(() => order.push(4));
    let drained = false;
    const done = slots.drained().then(() => (drained = true));
    slots.give();
    await third;
    assert.deepEqual(order, [3]);
    slots.give();
    await fourth;
    assert.deepEqual(order, [3, 4]);
    slots.give();
    await new Promise((r) => setImmediate(r));
    assert.equal(drained, false, 'one slot is still out');
    slots.give();
    await done;
    assert.equal(drained, true);
  });

  it('stores answers 64 at a time, the rest when flushed; a failed store is reported, not thrown', async () => {
    const stored: number[][] = [];
    const errors: unknown[] = [];
    let fail = false;
    const buffer = new AnswerBuffer(
      async (answers) => {
        if (fail) throw new Error('Redis is down');
        stored.push(answers.map((a) => a.index));
      },
      (err) => errors.push(err),
    );
    for (let i = 0; i < 70; i++) buffer.add(answer(i));
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(
      stored.map((s) => s.length),
      [64],
    );
    await buffer.flush();
    assert.deepEqual(stored[1], [64, 65, 66, 67, 68, 69]);
    fail = true;
    buffer.add(answer(70));
    await buffer.flush();
    assert.equal(errors.length, 1);
  });

  it('stores a few answers by itself, without a flush', async () => {
    let stored: (indexes: number[]) => void = () => undefined;
    const written = new Promise<number[]>((resolve) => (stored = resolve));
    const buffer = new AnswerBuffer(
      async (answers) => stored(answers.map((a) => a.index)),
      () => undefined,
    );
    buffer.add(answer(1));
    buffer.add(answer(2));
    assert.deepEqual(await written, [1, 2]);
  });
});
