import { cancelNoticeSchema, readMessage } from '@tserve/contract';

/** How long a cancellation is remembered at most, whatever deadline its notice names: longer than any request's deadline may be. */
const CANCEL_MEMORY_MS = 10 * 60_000;

/**
 * Requests whose client went away, as named on the model's cancellation channel. Every worker of
 * the model hears every notice, and most name requests another worker holds, so a notice is
 * forgotten once its request is answered here, or once its deadline has passed (the runner drops
 * such a request unrun anyway): a client that abandons hundreds of queued requests a second would
 * otherwise fill every worker's memory for ten minutes.
 */
export class Cancellations {
  /** Request id → when its cancellation may be forgotten. */
  private readonly heard = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Remembers the requests a notice names; false if the message is not a notice. */
  note(message: string): boolean {
    const notice = readMessage(cancelNoticeSchema, message);
    if (!notice) return false;
    const now = this.now();
    this.prune(now);
    const forgetAt = Math.min(notice.deadline, now + CANCEL_MEMORY_MS);
    for (const id of notice.ids) {
      // Re-inserted, so that the map stays in the order notices were heard: prune stops at the first one not yet due.
      this.heard.delete(id);
      this.heard.set(id, forgetAt);
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
   * Drops notices that are due, oldest first, stopping at the first that is not, so a notice costs
   * no walk over everything remembered. Deadlines come from one setting (REQUEST_TIMEOUT_MS, which a
   * client may only shorten), so notices fall due about in the order they were heard; one kept
   * behind a later one is kept at most until that one is due.
   */
  private prune(now: number): void {
    for (const [id, forgetAt] of this.heard) {
      if (forgetAt > now) return;
      this.heard.delete(id);
    }
  }
}
