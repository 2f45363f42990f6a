import type { LineAnswer } from './batches.js';

/** A running batch's lines on their way to the routes, and their answers on their way to Redis. */

/** Lines one batch keeps on their way when its model has no worker yet, or workers of small calls. */
const LEAST_LINES_IN_FLIGHT = 64;

/**
 * Lines one batch keeps on their way: two model calls' worth for each worker of its model (one call
 * running, the next one's lines waiting behind it), so that a batch keeps every worker busy and
 * speeds up as workers are added; at least LEAST_LINES_IN_FLIGHT. At most half of what the batch
 * class may hold in the model's queue, shared with other batches and gateways: a line past that
 * would only be shed and sent again.
 * @param callSequences the sequences one model call of each of the model's workers holds, together
 * @param bulkDepth the most bulk requests the model's queue takes (BATCH_QUEUE_SHARE of MAX_QUEUE_DEPTH)
 */
export function linesInFlight(callSequences: number, bulkDepth: number): number {
  return Math.max(1, Math.min(Math.max(LEAST_LINES_IN_FLIGHT, 2 * callSequences), Math.floor(bulkDepth / 2)));
}

/**
 * Lines on their way: `take` waits for a free slot, `drained` for every slot back. Their number is
 * asked at each slot given back, and may change as the batch runs (workers come and go).
 */
export class Slots {
  private used = 0;
  private readonly waiting: Array<() => void> = [];
  private readonly drains: Array<() => void> = [];

  constructor(private readonly size: () => number) {}

  /** Undefined when a slot was free (no wait); else a promise of the next one given back. */
  take(): Promise<void> | undefined {
    if (this.used < this.size()) {
      this.used++;
      return undefined;
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** A slot given back goes to the next waiting, if there is room for it. */
  give(): void {
    this.used--;
    if (this.waiting.length > 0 && this.used < this.size()) {
      this.used++;
      this.waiting.shift()!();
    }
    if (this.used === 0) for (const done of this.drains.splice(0)) done();
  }

  drained(): Promise<void> {
    return this.used === 0 ? Promise.resolve() : new Promise((resolve) => this.drains.push(resolve));
  }
}

/** Answers are stored this many at a time, or after this long, in one call. */
const ANSWERS_AT_ONCE = 64;
const ANSWERS_WAIT_MS = 20;

/**
 * A batch's answers, stored a few dozen at a time: one Redis call for many lines. An answer lost
 * with its gateway before it was stored leaves its line to be sent again.
 */
export class AnswerBuffer {
  private held: LineAnswer[] = [];
  private timer?: NodeJS.Timeout;
  private readonly writing = new Set<Promise<unknown>>();

  constructor(
    private readonly store: (answers: LineAnswer[]) => Promise<unknown>,
    private readonly onError: (err: unknown) => void,
  ) {}

  add(answer: LineAnswer): void {
    this.held.push(answer);
    if (this.held.length >= ANSWERS_AT_ONCE) this.write();
    else this.timer ??= setTimeout(() => this.write(), ANSWERS_WAIT_MS);
  }

  /** Stores what is held, and waits for every write under way. */
  async flush(): Promise<void> {
    this.write();
    await Promise.all(this.writing);
  }

  private write(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.held.length === 0) return;
    const written = this.store(this.held)
      .catch(this.onError)
      .finally(() => this.writing.delete(written));
    this.writing.add(written);
    this.held = [];
  }
}
