import type { LineAnswer } from './batches.js';

/** A running batch's lines on their way to the routes, and their answers on their way to Redis. */

/** Lines on their way: `take` waits for a free slot, `drained` for every slot back. */
export class Slots {
  private used = 0;
  private readonly waiting: Array<() => void> = [];
  private readonly drains: Array<() => void> = [];

  constructor(private readonly size: number) {}

  /** Undefined when a slot was free (no wait); else a promise of the next one given back. */
  take(): Promise<void> | undefined {
    if (this.used < this.size) {
      this.used++;
      return undefined;
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** A slot given back goes to the next waiting, if any. */
  give(): void {
    const next = this.waiting.shift();
    if (next) return next();
    this.used--;
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
