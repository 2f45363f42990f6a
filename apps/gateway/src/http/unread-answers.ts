import type http from 'node:http';

/** Why a connection was closed with its answer unread. */
export type UnreadReason = 'stalled' | 'over budget';

/**
 * Bounds the answers a gateway holds for clients that do not read them. An answer is written
 * whole, and what its socket cannot take yet stays in the gateway's memory until the client reads
 * it: an answer can be many times the size of its request (a vector per token, which
 * MAX_ANSWER_VALUES allows), so a client that asked for a few and never read them held much of a
 * gateway's memory (bench/HISTORY.md), for as long as it kept its connections open. So an answer
 * that makes no progress for `sendTimeoutMs` has its connection closed (nginx's send_timeout), and
 * once the answers waiting to be read pass `maxBytes`, those that have waited longest are closed
 * first: a client that reads takes its answer within moments, so what waits longest is what nobody
 * reads.
 *
 * Only answers the socket did not take at once are watched: the rest are in the kernel's hands,
 * and a connection idle after its answer is the keep-alive timeout's.
 */
export class UnreadAnswers {
  private readonly waiting = new Set<http.ServerResponse>();
  /** Connections closed so far, by reason. */
  readonly closed: Record<UnreadReason, number> = { stalled: 0, 'over budget': 0 };

  constructor(
    private readonly maxBytes: number,
    private readonly sendTimeoutMs: number,
    private readonly onClosed: (reason: UnreadReason, unreadBytes: number) => void,
  ) {}

  /** Bytes of answers written and not yet taken by their sockets. */
  get held(): number {
    let bytes = 0;
    for (const res of this.waiting) bytes += res.writableLength;
    return bytes;
  }

  /** Called once an answer is written whole (`end`): watches it if its socket has not taken all of it. */
  written(res: http.ServerResponse): void {
    if (res.writableLength === 0 || !res.socket || this.waiting.has(res)) return;
    this.waiting.add(res);
    const forget = () => this.waiting.delete(res);
    res.once('finish', forget).once('close', forget);
    // The socket's idle timer, which each write that progresses restarts; once the answer is taken,
    // Node sets it to the keep-alive timeout.
    res.setTimeout(this.sendTimeoutMs, () => this.close(res, 'stalled'));
    if (this.held > this.maxBytes) this.makeRoom();
  }

  /** Closes the connections that have waited longest until the rest fit; a lone answer always fits. */
  private makeRoom(): void {
    let held = this.held;
    // A Set iterates in the order answers were added, oldest first.
    for (const res of this.waiting) {
      if (held <= this.maxBytes || this.waiting.size === 1) return;
      held -= res.writableLength;
      this.close(res, 'over budget');
    }
  }

  private close(res: http.ServerResponse, reason: UnreadReason): void {
    if (!this.waiting.delete(res)) return;
    this.closed[reason]++;
    this.onClosed(reason, res.writableLength);
    res.destroy();
  }
}
