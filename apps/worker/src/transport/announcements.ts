/**
 * What a worker knows of its queue without asking Redis: how many jobs the gateways announced on
 * the model's work channel (WorkNotice) that it has not fetched, and whether jobs nobody announced
 * may wait. Those are the jobs waiting when the worker starts, a dead worker's jobs that BullMQ
 * returned to the queue, and any whose notice the worker missed; they are found by fetching until
 * the queue is empty, at the start and whenever a poll finds one.
 */
export class Announcements {
  private announced = 0;
  private unannounced = true;
  private interactive = false;

  /** A notice of `jobs` added, `interactive` or in the bulk class. */
  heard(jobs: number, interactive: boolean): void {
    this.announced += jobs;
    if (interactive) this.interactive = true;
  }

  /**
   * Whether interactive jobs were announced since the last time this was asked. Only then may
   * interactive work wait for a worker busy with bulk work, which asks the queue how much.
   */
  interactiveSinceAsked(): boolean {
    const heard = this.interactive;
    this.interactive = false;
    return heard;
  }

  /** Whether a fetch now would likely find a job: otherwise the worker waits for a notice. */
  get expecting(): boolean {
    return this.announced > 0 || this.unannounced;
  }

  /** Jobs waiting as far as the notices tell; undefined where jobs nobody announced may wait (ask the queue). */
  get waiting(): number | undefined {
    return this.unannounced ? undefined : this.announced;
  }

  /** The queue's own count of what waits, read just now: it replaces what the notices told. */
  counted(waiting: number): void {
    this.announced = waiting;
    this.unannounced = false;
  }

  /**
   * A fetch of `asked` jobs found `found`. Fewer than asked: the queue is empty (another worker took
   * what was announced). A job found without a notice to expect it (`polled`) may have others
   * behind it, nobody's announced either.
   */
  fetched(asked: number, found: number, polled = false): void {
    if (found < asked) {
      this.announced = 0;
      this.unannounced = false;
      return;
    }
    this.announced = Math.max(0, this.announced - found);
    if (polled && found > 0) this.unannounced = true;
  }
}
