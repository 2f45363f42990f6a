/**
 * How long interactive work counts as present after it last ran (ms): a few of its usual gaps
 * between calls, within these bounds. While it is present, bulk model calls are kept short;
 * past it, a bulk call is as large as the limits allow, and only the first interactive
 * request to come back waits for a whole one. A fixed ten seconds kept a batch that followed a burst
 * of interactive traffic in the short calls sized for that burst's last trickle long after it ended
 * (bench/HISTORY.md); sparse interactive traffic still keeps the calls short between its requests.
 */
export const PRESENT_MS = { least: 500, most: 10_000 };

/** Interactive work counts as present for this many of its usual gaps after it last ran. */
const GAPS_PRESENT = 4;

/** The newest measurement's weight in the running averages of call times and gaps. */
const WEIGHT = 0.2;

const averaged = (average: number | undefined, sample: number) =>
  average === undefined ? sample : average + WEIGHT * (sample - average);

/** How a batch's model calls make way for more urgent work (the consumer's, for bulk work). */
export interface CallPacing {
  /** The most rows the next call may hold. */
  rows(): number | undefined;
  /** Between two calls: runs what must not wait for the rest of the batch. */
  between(): Promise<void>;
  /** A call of `rows` live rows took `ms`, decoding included. */
  ran(rows: number, ms: number): void;
}

/**
 * Interactive work's precedence over bulk work inside a worker. A model call is not
 * interrupted, so an interactive request that arrives while a bulk call runs waits for the
 * rest of it. While interactive work is present, bulk calls are cut to about as many rows as
 * take one interactive call's time: the wait stays within an interactive call on any device, and
 * bulk work runs at full size when nothing interactive is about.
 */
export class Precedence {
  private interactiveAt = Number.NEGATIVE_INFINITY;
  private interactiveCallMs?: number;
  /** The usual time from one interactive call's end to the next's. */
  private interactiveGapMs?: number;
  private bulkRowMs?: number;

  constructor(
    /** BATCH_MAX_SIZE: the most rows any call may hold. */
    private readonly maxRows: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** An interactive model call took `ms`. */
  interactiveRan(ms: number): void {
    const now = this.now();
    if (this.interactiveAt !== Number.NEGATIVE_INFINITY)
      this.interactiveGapMs = averaged(this.interactiveGapMs, now - this.interactiveAt);
    this.interactiveAt = now;
    this.interactiveCallMs = averaged(this.interactiveCallMs, ms);
  }

  /** A bulk model call of `rows` rows took `ms`. */
  bulkRan(rows: number, ms: number): void {
    if (rows > 0) this.bulkRowMs = averaged(this.bulkRowMs, ms / rows);
  }

  /** The most rows the next bulk call may hold. */
  bulkRows(): number {
    if (!this.present() || this.interactiveCallMs === undefined || this.bulkRowMs === undefined) return this.maxRows;
    const rows = Math.floor(this.interactiveCallMs / Math.max(this.bulkRowMs, Number.EPSILON));
    return Math.min(this.maxRows, Math.max(1, rows));
  }

  private present(): boolean {
    const window =
      this.interactiveGapMs === undefined
        ? PRESENT_MS.most
        : Math.min(PRESENT_MS.most, Math.max(PRESENT_MS.least, GAPS_PRESENT * this.interactiveGapMs));
    return this.now() - this.interactiveAt <= window;
  }
}
