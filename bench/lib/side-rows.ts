import { median, round } from './stats.ts';

/** One side's points at c=1 and c=64, one a round. */
export interface SidePoints<P> {
  c1: P[];
  c64: P[];
}

/** A side as a row names it: its key in the points, and its label. */
interface Named<S> {
  side: S;
  label: string;
}

/**
 * The lines of a side-by-side bench (bench:ab, bench:python): per figure, each side's median over
 * the interleaved rounds, `over`'s median divided by `under`'s, and every round's value. `first`
 * is printed first; `width` pads the figure's name.
 */
export function sideRows<S extends string, P>(
  points: Record<S, SidePoints<P>>,
  sides: { first: Named<S>; second: Named<S>; over: S; width: number },
) {
  const med = (side: S, at: keyof SidePoints<P>, figure: keyof P) =>
    median(points[side][at].map((p) => p[figure] as number));
  const row = (name: string, at: keyof SidePoints<P>, figure: keyof P, digits: number) => {
    const { first, second, over, width } = sides;
    const [a, b] = [med(first.side, at, figure), med(second.side, at, figure)];
    const each = (side: S) => points[side][at].map((p) => round(p[figure] as number, digits)).join(' ');
    const ratio = over === first.side ? a / b : b / a;
    const [top, bottom] = over === first.side ? [first, second] : [second, first];
    return `  ${name.padEnd(width)} ${first.label} ${String(round(a, digits)).padStart(8)}  ${second.label} ${String(round(b, digits)).padStart(8)}  ${top.label}/${bottom.label} ${round(ratio, 3)}   (${first.label}: ${each(first.side)}; ${second.label}: ${each(second.side)})`;
  };
  return { med, row };
}
