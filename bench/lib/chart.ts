import type { BenchResults } from './types.ts';

/**
 * Latency against throughput, one panel per model, drawn as plain SVG (no browser or plotting
 * library needed to produce it). Both axes are logarithmic: the sweep spans two decades of each.
 * Solid lines: the server's sweep (labelled by concurrency). Dashed: the in-process frontier
 * (one-at-a-time calls, then pipe(list) at the batch sizes the server formed): how far the server
 * sits from it is the cost of HTTP, the queue and process hops.
 */

interface Pt {
  x: number;
  y: number;
  label?: string;
}

const PANEL_W = 600;
const PANEL_H = 520;
// The bottom band holds the axis title and the legend, so the legend never covers a point.
const M = { left: 64, right: 20, top: 44, bottom: 132 };
const COLORS = ['#1f6fb4', '#d9480f', '#2b8a3e', '#7048e8'];
const FONT = 'font-family="Helvetica, Arial, sans-serif"';

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
const fmt = (v: number) => (v >= 1000 ? `${v / 1000}k` : String(v));

function logTicks(min: number, max: number): number[] {
  const ticks: number[] = [];
  for (let e = Math.floor(Math.log10(min)); e <= Math.ceil(Math.log10(max)); e++) {
    for (const m of [1, 2, 5]) {
      const v = m * 10 ** e;
      if (v >= min && v <= max) ticks.push(Number(v.toPrecision(3)));
    }
  }
  return ticks;
}

function domain(values: number[]): [number, number] {
  const finite = values.filter((v) => Number.isFinite(v) && v > 0);
  if (!finite.length) return [1, 10];
  let lo = Math.min(...finite) / 1.4;
  let hi = Math.max(...finite) * 1.4;
  if (hi / lo < 10) {
    const mid = Math.sqrt(lo * hi);
    lo = mid / Math.sqrt(10);
    hi = mid * Math.sqrt(10);
  }
  return [lo, hi];
}

function panel(r: BenchResults, model: string, ox: number): string {
  const m = r.models.find((x) => x.model === model)!;
  const lengths = [...new Set(m.singles.map((s) => s.tokens))].sort((a, b) => a - b);
  const server = new Map<number, Pt[]>();
  const inproc = new Map<number, Pt[]>();
  const batch1: Array<Pt & { tokens: number }> = [];
  for (const tokens of lengths) {
    server.set(
      tokens,
      r.points
        .filter((p) => p.model === model && p.kind === 'sweep' && p.tokens === tokens)
        .sort((a, b) => a.concurrency - b.concurrency)
        .map((p) => ({ x: p.load.rps, y: p.load.latency.p50, label: `c=${p.concurrency}` })),
    );
    const single = m.singles.find((s) => s.tokens === tokens)!;
    const frontier: Pt[] = [{ x: 1000 / single.latency.p50, y: single.latency.p50, label: '1' }];
    for (const b of m.batched
      .filter((b) => b.tokens === tokens && b.batchSize > 1)
      .sort((a, c) => a.batchSize - c.batchSize)) {
      frontier.push({ x: b.seqPerSec, y: b.callP50Ms, label: `b=${b.batchSize}` });
    }
    inproc.set(tokens, frontier);
    for (const p of r.points.filter((p) => p.model === model && p.kind === 'batch1' && p.tokens === tokens)) {
      batch1.push({ x: p.load.rps, y: p.load.latency.p50, tokens, label: `c=${p.concurrency}, size 1` });
    }
  }
  const mixed = r.mixed
    .filter((x) => x.model === model)
    .map((x) => ({ x: x.mixed.rps, y: x.mixed.latency.p50, tokens: x.shortTokens }));
  const all = [...server.values(), ...inproc.values(), batch1, mixed].flat();
  const [x0, x1] = domain(all.map((p) => p.x));
  const [y0, y1] = domain(all.map((p) => p.y));
  const w = PANEL_W - M.left - M.right;
  const h = PANEL_H - M.top - M.bottom;
  const sx = (v: number) => ox + M.left + ((Math.log10(v) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0))) * w;
  const sy = (v: number) => M.top + h - ((Math.log10(v) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0))) * h;
  const ok = (p: Pt) => Number.isFinite(p.x) && Number.isFinite(p.y) && p.x > 0 && p.y > 0;

  const s: string[] = [];
  s.push(
    `<text x="${ox + M.left + w / 2}" y="${M.top - 14}" text-anchor="middle" font-size="15" font-weight="bold" ${FONT}>${esc(model)}</text>`,
  );
  s.push(`<rect x="${ox + M.left}" y="${M.top}" width="${w}" height="${h}" fill="#fff" stroke="#999"/>`);
  for (const t of logTicks(x0, x1)) {
    s.push(`<line x1="${sx(t)}" x2="${sx(t)}" y1="${M.top}" y2="${M.top + h}" stroke="#eee"/>`);
    s.push(
      `<text x="${sx(t)}" y="${M.top + h + 16}" text-anchor="middle" font-size="11" fill="#444" ${FONT}>${fmt(t)}</text>`,
    );
  }
  for (const t of logTicks(y0, y1)) {
    s.push(`<line x1="${ox + M.left}" x2="${ox + M.left + w}" y1="${sy(t)}" y2="${sy(t)}" stroke="#eee"/>`);
    s.push(
      `<text x="${ox + M.left - 6}" y="${sy(t) + 4}" text-anchor="end" font-size="11" fill="#444" ${FONT}>${fmt(t)}</text>`,
    );
  }
  s.push(
    `<text x="${ox + M.left + w / 2}" y="${M.top + h + 36}" text-anchor="middle" font-size="12" ${FONT}>throughput (requests/s; in-process: sequences/s)</text>`,
  );
  s.push(
    `<text transform="translate(${ox + 16},${M.top + h / 2}) rotate(-90)" text-anchor="middle" font-size="12" ${FONT}>p50 latency (ms)</text>`,
  );

  lengths.forEach((tokens, i) => {
    const color = COLORS[i % COLORS.length];
    const sv = server.get(tokens)!.filter(ok);
    const ip = inproc.get(tokens)!.filter(ok);
    if (ip.length > 1)
      s.push(
        `<polyline fill="none" stroke="${color}" stroke-width="1.5" stroke-dasharray="5,4" points="${ip.map((p) => `${sx(p.x)},${sy(p.y)}`).join(' ')}"/>`,
      );
    for (const p of ip) {
      s.push(
        `<rect x="${sx(p.x) - 4}" y="${sy(p.y) - 4}" width="8" height="8" fill="#fff" stroke="${color}" stroke-width="1.5"/>`,
      );
      s.push(
        `<text x="${sx(p.x) + 6}" y="${sy(p.y) + 14}" font-size="10" fill="${color}" ${FONT}>${esc(p.label ?? '')}</text>`,
      );
    }
    if (sv.length > 1)
      s.push(
        `<polyline fill="none" stroke="${color}" stroke-width="2.5" points="${sv.map((p) => `${sx(p.x)},${sy(p.y)}`).join(' ')}"/>`,
      );
    for (const p of sv) {
      s.push(`<circle cx="${sx(p.x)}" cy="${sy(p.y)}" r="4.5" fill="${color}"/>`);
      s.push(
        `<text x="${sx(p.x) - 6}" y="${sy(p.y) - 8}" text-anchor="end" font-size="11" font-weight="bold" fill="${color}" ${FONT}>${esc(p.label ?? '')}</text>`,
      );
    }
    for (const p of batch1.filter((b) => b.tokens === tokens && ok(b))) {
      const [cx, cy] = [sx(p.x), sy(p.y)];
      s.push(
        `<path d="M${cx - 5},${cy - 5}L${cx + 5},${cy + 5}M${cx - 5},${cy + 5}L${cx + 5},${cy - 5}" stroke="${color}" stroke-width="2.5"/>`,
      );
      s.push(`<text x="${cx + 8}" y="${cy + 4}" font-size="10" fill="${color}" ${FONT}>size 1</text>`);
    }
    for (const p of mixed.filter((x) => x.tokens === tokens && ok(x))) {
      const [cx, cy] = [sx(p.x), sy(p.y)];
      s.push(
        `<path d="M${cx},${cy - 6}L${cx + 6},${cy}L${cx},${cy + 6}L${cx - 6},${cy}Z" fill="#fff" stroke="${color}" stroke-width="2"/>`,
      );
      s.push(`<text x="${cx + 8}" y="${cy + 4}" font-size="10" fill="${color}" ${FONT}>mixed</text>`);
    }
  });

  const lx = ox + M.left;
  let ly = M.top + h + 62;
  lengths.forEach((tokens, i) => {
    const color = COLORS[i % COLORS.length];
    s.push(
      `<line x1="${lx}" x2="${lx + 22}" y1="${ly - 4}" y2="${ly - 4}" stroke="${color}" stroke-width="2.5"/><circle cx="${lx + 11}" cy="${ly - 4}" r="4" fill="${color}"/>`,
    );
    s.push(`<text x="${lx + 28}" y="${ly}" font-size="11" ${FONT}>server, ${tokens} tokens (c: concurrency)</text>`);
    const rx = lx + w / 2;
    s.push(
      `<line x1="${rx}" x2="${rx + 22}" y1="${ly - 4}" y2="${ly - 4}" stroke="${color}" stroke-width="1.5" stroke-dasharray="5,4"/><rect x="${rx + 7}" y="${ly - 8}" width="8" height="8" fill="#fff" stroke="${color}" stroke-width="1.5"/>`,
    );
    s.push(
      `<text x="${rx + 28}" y="${ly}" font-size="11" ${FONT}>in-process, ${tokens} tok (1: pipe(text); b: list size)</text>`,
    );
    ly += 18;
  });
  if (batch1.length || mixed.length) {
    s.push(
      `<text x="${lx}" y="${ly}" font-size="11" fill="#444" ${FONT}>× server, BATCH_MAX_SIZE=1     ◇ server, mixed lengths (1 in ${r.mixed[0]?.every ?? '?'} is ${r.mixed[0]?.longTokens ?? '?'} tok)</text>`,
    );
  }
  return s.join('\n');
}

export function drawChart(r: BenchResults): string {
  const models = r.models.map((m) => m.model);
  const width = PANEL_W * Math.max(1, models.length);
  const height = PANEL_H + 24;
  const title = `tserve: p50 latency vs throughput, ${r.meta.machine.cpus} cores, ${r.meta.startedAt.slice(0, 16).replace('T', ' ')} (${r.meta.options.quick ? 'quick' : 'full'})`;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`,
    `<rect width="100%" height="100%" fill="#fafafa"/>`,
    `<text x="${width / 2}" y="20" text-anchor="middle" font-size="16" ${FONT}>${esc(title)}</text>`,
    `<g transform="translate(0,24)">`,
    ...models.map((model, i) => panel(r, model, i * PANEL_W)),
    `</g>`,
    `</svg>`,
  ].join('\n');
}
