import { setTimeout as turnOfTheLoop } from 'node:timers/promises';

/** Longest stretch of tokenizing or post-processing before the thread lets its timers and I/O run. */
const SLICE_MS = 50;

/**
 * Gives the event loop a turn once SLICE_MS of synchronous work has run since the last. Tokenizing
 * and post-processing are synchronous and some inputs take long (a megabyte of text to tokenize;
 * hundreds of fill-mask candidates); a batch of them done in one go would starve
 * the heartbeat and the lock renewals, and gateways and BullMQ would count this worker dead and
 * send its work again.
 */
export class LoopTurns {
  private since = performance.now();

  /** Whether any turn was given so far. */
  given = false;

  async take(): Promise<void> {
    if (performance.now() - this.since < SLICE_MS) return;
    // A timeout, not an immediate: an immediate's turn can come before the timers' phase.
    await turnOfTheLoop(0);
    this.since = performance.now();
    this.given = true;
  }
}
