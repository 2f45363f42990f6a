import type { CancelNotice } from '@tserve/contract';

/** How long a cancellation is remembered: longer than any request's deadline may be. */
const CANCEL_MEMORY_MS = 10 * 60_000;

/**
 * Requests whose client went away, as named on the model's cancellation channel. Every worker of
 * the model hears every notice, and most name requests another worker holds, so a notice is
 * forgotten once its request is answered here or once it is older than any deadline.
 */
export class Cancellations {
  /** Request id → when its cancellation was heard. */
  private readonly heard = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Remembers the requests a notice names; false if the message is not a notice. */
  note(message: string): boolean {
    let notice: CancelNotice;
    try {
      notice = JSON.parse(message) as CancelNotice;
    } catch {
      return false;
    }
    if (!Array.isArray(notice?.ids)) return false;
    const now = this.now();
    this.prune(now);
    for (const id of notice.ids) {
      // Re-inserted, so that the map stays in the order notices were heard: prune stops at the first fresh one.
      this.heard.delete(id);
      this.heard.set(id, now);
    }
    return true;
  }

  /** True for a request whose client has gone away; the runner skips it. */
  has(requestId: string): boolean {
    return this.heard.has(requestId);
  }

  forget(requestId: string): void {
    this.heard.delete(requestId);
  }

  /**
   * Drops notices older than any deadline: their requests ran elsewhere or expired. Oldest first,
   * stopping at the first fresh one, so a notice costs no walk over everything remembered.
   */
  private prune(now: number): void {
    for (const [id, at] of this.heard) {
      if (now - at <= CANCEL_MEMORY_MS) return;
      this.heard.delete(id);
    }
  }
}
