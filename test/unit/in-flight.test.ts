import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { AnswerBuffer, linesInFlight, Slots } from '../../apps/gateway/src/offline/in-flight.ts';
import type { LineAnswer } from '../../apps/gateway/src/offline/batches.ts';

const answer = (index: number): LineAnswer => ({ index, line: `{"i":${index}}`, ok: true });

describe("a running batch's lines in flight", () => {
  it('holds at most its size of lines; a slot given back goes to the first waiting; drained waits for all', async () => {
    const slots = new Slots(() => 2);
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

  it('follows its size as it changes: more lines go out once it grows, fewer once it shrinks', async () => {
    let size = 1;
    const slots = new Slots(() => size);
    assert.equal(slots.take(), undefined);
    let second = false;
    const waiting = slots.take()!.then(() => (second = true));
    size = 3;
    slots.give();
    await waiting;
    assert.equal(second, true);
    assert.equal(slots.take(), undefined, 'grown: a third goes out at once');
    size = 1;
    let fourth = false;
    void slots.take()!.then(() => (fourth = true));
    slots.give();
    await new Promise((r) => setImmediate(r));
    assert.equal(fourth, false, 'shrunk to one: two still out hold it back');
    slots.give();
    await new Promise((r) => setImmediate(r));
    assert.equal(fourth, true, 'the last one out lets it go');
  });

  it("keeps two model calls' worth of lines per worker on their way, within half the batch class's depth", () => {
    assert.equal(linesInFlight(0, 500), 64, 'no worker yet: the least');
    assert.equal(linesInFlight(32, 500), 64, 'one CPU worker');
    assert.equal(linesInFlight(3 * 32, 500), 192, 'three CPU workers');
    assert.equal(linesInFlight(128 * 8, 500), 250, 'eight GPU workers: half of the depth');
    assert.equal(linesInFlight(32, 40), 20, 'a small depth bounds even the least');
    assert.equal(linesInFlight(32, 1), 1, 'at least one');
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
