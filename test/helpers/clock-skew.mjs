/**
 * A process preload (`node --import ./test/helpers/clock-skew.mjs`) that sets the process's wall
 * clock CLOCK_SKEW_MS off (either sign): Date.now() and new Date() read it, as on a host whose clock
 * is that far off. Timers and performance.now() are untouched, as they are on such a host.
 */
const skew = Number(process.env.CLOCK_SKEW_MS ?? 0);
const RealDate = globalThis.Date;

class SkewedDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(RealDate.now() + skew);
    else super(...args);
  }

  static now() {
    return RealDate.now() + skew;
  }
}

globalThis.Date = SkewedDate;
