import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type http from 'node:http';
import { UnreadAnswers, type UnreadReason } from '../../apps/gateway/src/http/unread-answers.ts';

/** An answer as UnreadAnswers sees it: bytes its socket has not taken, its idle timer, and destroy. */
class Answer extends EventEmitter {
  socket = {};
  destroyed = false;
  onIdle?: () => void;
  constructor(public writableLength: number) {
    super();
  }
  setTimeout(_ms: number, onIdle: () => void): this {
    this.onIdle = onIdle;
    return this;
  }
  destroy(): void {
    this.destroyed = true;
    this.emit('close');
  }
}

/** UnreadAnswers of `maxBytes`, and the closings it reported. */
function harness(maxBytes: number) {
  const closed: Array<[UnreadReason, number]> = [];
  const unread = new UnreadAnswers(maxBytes, 1000, (reason, bytes) => closed.push([reason, bytes]));
  return { unread, closed, write: (answer: Answer) => unread.written(answer as unknown as http.ServerResponse) };
}

describe('UnreadAnswers', () => {
  it('watches only answers whose sockets did not take them whole, and forgets them once taken', () => {
    const { unread, write } = harness(100);
    const taken = new Answer(0);
    const waiting = new Answer(60);
    write(taken);
    write(waiting);
    assert.equal(unread.held, 60);
    waiting.writableLength = 0;
    waiting.emit('finish');
    assert.equal(unread.held, 0);
  });

  it('closes an answer that made no progress for the send timeout', () => {
    const { unread, closed, write } = harness(100);
    const answer = new Answer(60);
    write(answer);
    answer.onIdle?.();
    assert.deepEqual([closed, answer.destroyed, unread.held], [[['stalled', 60]], true, 0]);
  });

  it('past its budget closes the answers that waited longest until the rest fit; a lone answer always fits', () => {
    const { unread, closed, write } = harness(100);
    const [old, older, newest] = [new Answer(50), new Answer(40), new Answer(80)];
    const lone = new Answer(500);
    write(lone);
    assert.deepEqual([closed, unread.held], [[], 500], 'one answer over the budget is kept');
    lone.writableLength = 0;
    lone.emit('finish');
    write(old);
    write(older);
    assert.deepEqual(closed, [], '90 of 100 bytes');
    write(newest);
    assert.deepEqual(closed, [
      ['over budget', 50],
      ['over budget', 40],
    ]);
    assert.deepEqual([old.destroyed, older.destroyed, newest.destroyed, unread.held], [true, true, false, 80]);
  });
});
