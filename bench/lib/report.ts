import fs from 'node:fs';
import path from 'node:path';
import { maxOf, round } from './stats.ts';
import { DISTURBED_PCT, type CpuUsage } from './cpu.ts';
import { STAGGERED_INSTANCES } from './soak.ts';
import type { GcWindow } from './gateway-gc.ts';
import type { BenchResults, ServerPoint } from './types.ts';

/** The human-readable summary on stdout, and the JSON files under the results folder. */

type Cell = string | number | undefined;

function table(headers: string[], rows: Cell[][], leftColumns = 1): string {
  const text = rows.map((r) =>
    r.map((c) => (c === undefined || (typeof c === 'number' && !Number.isFinite(c)) ? '-' : String(c))),
  );
  const widths = headers.map((h, i) => Math.max(h.length, ...text.map((r) => r[i]?.length ?? 0)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i < leftColumns ? c.padEnd(widths[i]) : c.padStart(widths[i])))
      .join('  ')
      .trimEnd();
  return [line(headers), line(widths.map((w) => '-'.repeat(w))), ...text.map(line)].join('\n');
}

const short = (model: string) =>
  model
    .split('/')
    .pop()!
    .replace(/-uncased.*|-base.*/, '');
const ms = (v: number | undefined) => (v === undefined ? undefined : round(v, v < 10 ? 2 : 1));

function cpuCell(p: ServerPoint): string | undefined {
  const cpu = p.load.cpu;
  if (!cpu) return undefined;
  const worker = Object.entries(cpu.procs).find(
    ([k]) => k.startsWith('worker:') && k.endsWith(p.model.split('/').pop()!),
  )?.[1];
  return (
    [cpu.procs.gateway, worker, cpu.procs.redis, cpu.procs.bench, cpu.other].map((v) => v ?? '-').join('/') + flag(cpu)
  );
}

/** Marks a figure taken while processes outside the bench used a noticeable share of the CPU. */
const flag = (cpu: CpuUsage | undefined) => (cpu && cpu.other > DISTURBED_PCT ? ' !' : '');

/** The soak in slices of a few seconds: flat rows mean no drift; a climbing column is a leak or a backlog. */
function soakTimeline(s: NonNullable<BenchResults['soak']>): string[] {
  const timeline = s.load.timeline ?? [];
  if (!timeline.length) return [];
  const step = Math.max(1, Math.ceil(timeline.length / 12));
  const rows: Cell[][] = [];
  for (let i = 0; i < timeline.length; i += step) {
    const slice = timeline.slice(i, i + step);
    const sum = (f: (t: (typeof slice)[number]) => number) => slice.reduce((a, t) => a + f(t), 0);
    const end = Math.min(i + step, timeline.length);
    const rss = end >= timeline.length ? s.rss.end : s.rss.samples.find((x) => x.second === end)?.mib;
    rows.push([
      `${i}-${i + slice.length}`,
      round(sum((t) => t.sent) / slice.length, 0),
      round(sum((t) => t.status['200'] ?? 0) / slice.length, 0),
      round(sum((t) => t.status['503'] ?? 0) / slice.length, 0),
      sum((t) => t.status['504'] ?? 0),
      ms(Math.max(...slice.map((t) => t.p99))),
      ms(Math.max(...slice.map((t) => t.max))),
      ms(maxOf(slice.map((t) => t.p99ByStatus['503']))),
      rss,
    ]);
  }
  return [
    'Soak over time (per second averages; p99 max and max over all statuses, 503 p99 max over the refusals: the worst second of each):',
    table(['seconds', 'sent/s', '200/s', '503/s', '504', 'p99 max', 'max', '503 p99 max', 'RSS MiB at end'], rows, 0),
  ];
}

/** Per model: the short sweep, the long sweep, the mixed run and the varied run, each point's worker memory gathered. */
function workerMemoryRows(r: BenchResults): Cell[][] {
  const rows: Cell[][] = [];
  for (const { model } of r.models) {
    const sweep = r.points.filter((p) => p.model === model && p.kind === 'sweep');
    const lengths = sweep.map((p) => p.tokens);
    const workloads: Array<[string, Array<ServerPoint['load']>]> = [
      [
        `short (${Math.min(...lengths)} tok)`,
        sweep.filter((p) => p.tokens === Math.min(...lengths)).map((p) => p.load),
      ],
      [`long (${Math.max(...lengths)} tok)`, sweep.filter((p) => p.tokens === Math.max(...lengths)).map((p) => p.load)],
      ['mixed', r.mixed.filter((m) => m.model === model).map((m) => m.mixed)],
      ['varied (1-400 words)', r.points.filter((p) => p.model === model && p.kind === 'varied').map((p) => p.load)],
    ];
    for (const [name, loads] of workloads) {
      const measured = loads.filter((l) => l.workerMemory);
      if (!measured.length) continue;
      rows.push([
        short(model),
        name,
        measured[0].workerMemory!.startMiB,
        maxOf(measured.map((l) => l.workerMemory!.peakMiB)),
        measured.length === 1 ? round(measured[0].rps, 1) : undefined,
      ]);
    }
  }
  return rows;
}

/** The run: when, where, with which settings, options and models. */
function headerLines(r: BenchResults): string[] {
  const out: string[] = [];
  const m = r.meta;
  out.push(
    `tserve benchmark  ${m.startedAt}  (${round(m.elapsedSeconds / 60, 1)} min)`,
    `machine: ${m.machine.cpus} x ${m.machine.cpuModel}, ${m.machine.memGiB} GiB, node ${m.machine.node}; target ${m.target}`,
    `server settings: ${
      Object.entries(m.serverSettings)
        .map(([k, v]) => `${k}=${v}`)
        .join(' ') || '(defaults)'
    }`,
    `options: ${m.options.quick ? 'quick' : 'full'}, ${String(m.options.durationSeconds)} s per point after ${String(m.options.warmupSeconds)} s warm-up; waited ${round(m.quietWaitSeconds, 1)} s for a quiet machine, re-ran ${m.quietRetries} disturbed measurement(s)`,
    // fp32 and q8 differ in speed and in whether batches move answers (docs/models.md): every figure of a model is of this dtype.
    `models (device/dtype, in-process and on the workers): ${r.models.map((x) => `${short(x.model)} ${x.device ?? '?'}/${x.dtype ?? '?'}`).join(', ')}`,
    '',
  );

  return out;
}

/** The concurrency sweep: a row per point, beside the in-process figure at its batch size. */
function sweepLines(r: BenchResults, sweep: ServerPoint[]): string[] {
  const out: string[] = [];
  if (!sweep.length) return out;
  out.push('Concurrency sweep (closed loop). Latency: client-side, 200 responses, ms. batch: mean x-batch-size.');
  out.push(
    'queue/infer/gw: medians of x-queue-time, x-inference-time, x-total-time; http: client latency - x-total-time (median).',
  );
  out.push(
    'busy: % of the point the model computed (the sum of x-inference-time / x-batch-size over the answers); below 100 it waited for work.',
  );
  out.push(
    `cpu: % of one core used by gateway/worker/redis/bench(load generator)/other processes during the point; ! other > ${DISTURBED_PCT}%.`,
  );
  out.push(
    "redis: per answered request, the commands Redis ran (INFO commandstats, inside BullMQ's scripts too) and the redis-server CPU µs.",
  );
  if (r.meta.target !== 'started by the bench')
    out.push('(with --url the server\'s own processes are not known and count as "other")');
  out.push(
    table(
      [
        'model',
        'tok',
        'c',
        'req/s',
        'p50',
        'p90',
        'p99',
        'err',
        'redis cmd',
        'redis µs',
        'batch',
        'queue',
        'infer',
        'busy',
        'gw',
        'http',
        'in-proc seq/s',
        'x in-proc',
        'cpu gw/wk/rd/bn/oth',
      ],
      sweep.map((p) => {
        const model = r.models.find((x) => x.model === p.model);
        const size = Math.max(1, Math.round(p.load.server.batchMean));
        const inproc = model?.batched.find((b) => b.tokens === p.tokens && b.batchSize === size);
        return [
          short(p.model),
          p.tokens,
          p.concurrency,
          round(p.load.rps, 1),
          ms(p.load.latency.p50),
          ms(p.load.latency.p90),
          ms(p.load.latency.p99),
          p.load.errors,
          p.load.redis && round(p.load.redis.commandsPerRequest, 1),
          p.load.redis && round(p.load.redis.processUsecPerRequest, 1),
          round(p.load.server.batchMean, 1),
          ms(p.load.server.queueMs.p50),
          ms(p.load.server.inferenceMs.p50),
          Math.round(p.load.server.modelBusy * 100),
          ms(p.load.server.gatewayTotalMs.p50),
          ms(p.load.server.clientOverheadMs.p50),
          inproc ? `${round(inproc.seqPerSec, 1)} @${size}` : undefined,
          inproc ? round(p.load.rps / inproc.seqPerSec, 2) : undefined,
          cpuCell(p),
        ];
      }),
    ),
    '',
  );
  return out;
}

/** The in-process baseline: the transformers.js pipeline in the bench's own process, the server idle. */
function baselineLines(r: BenchResults): string[] {
  const out: string[] = [];
  out.push(
    'In-process baseline (transformers.js pipeline in the bench process, server idle): pipe(text) one at a time; pipe(list) throughput by batch size.',
  );
  out.push(
    table(
      ['model', 'tok', 'p50 ms', 'p99 ms', 'other cpu', 'batched (batch size: seq/s, call p50 ms)'],
      r.models.flatMap((x) =>
        x.singles.map((s) => [
          short(x.model),
          s.tokens,
          ms(s.latency.p50),
          ms(s.latency.p99),
          `${s.cpu.other}%${flag(s.cpu)}`,
          x.batched
            .filter((b) => b.tokens === s.tokens)
            .map((b) => `${b.batchSize}: ${round(b.seqPerSec, 0)} (${ms(b.callP50Ms)})${flag(b.cpu)}`)
            .join('  '),
        ]),
      ),
    ),
    '',
  );

  return out;
}

/** The batching gain: each point again with the worker restarted with BATCH_MAX_SIZE=1. */
function batchingGainLines(r: BenchResults, sweep: ServerPoint[]): string[] {
  const out: string[] = [];
  const batch1 = r.points.filter((p) => p.kind === 'batch1');
  if (!batch1.length) return out;
  out.push('Batching gain: the same point with the worker restarted with BATCH_MAX_SIZE=1.');
  out.push(
    table(
      ['model', 'tok', 'c', 'req/s batched', 'req/s size 1', 'gain', 'p50 batched', 'p50 size 1', 'p99 size 1'],
      batch1.map((b) => {
        const full = sweep.find((p) => p.model === b.model && p.tokens === b.tokens && p.concurrency === b.concurrency);
        return [
          short(b.model),
          b.tokens,
          b.concurrency,
          full && round(full.load.rps, 1),
          round(b.load.rps, 1),
          full && round(full.load.rps / b.load.rps, 2),
          ms(full?.load.latency.p50),
          ms(b.load.latency.p50),
          ms(b.load.latency.p99),
        ];
      }),
    ),
    '',
  );
  return out;
}

/** Mixed lengths: one input in N long, against the all-short sweep point at the same concurrency. */
function mixedLines(r: BenchResults, sweep: ServerPoint[]): string[] {
  const out: string[] = [];
  if (!r.mixed.length) return out;
  out.push(
    'Mixed lengths: one input in N is long, the rest short, against the all-short sweep point at the same concurrency.',
  );
  out.push(
    table(
      [
        'model',
        'c',
        'mix',
        'req/s mixed',
        'req/s short',
        'ratio',
        'in-proc ideal',
        'p50 mixed',
        'p99 mixed',
        'p99 short',
        'batch mixed',
        'err',
      ],
      r.mixed.map((x) => {
        const allShort = sweep.find(
          (p) => p.model === x.model && p.tokens === x.shortTokens && p.concurrency === x.concurrency,
        );
        return [
          short(x.model),
          x.concurrency,
          `1/${x.every} @${x.longTokens} tok`,
          round(x.mixed.rps, 1),
          round(x.allShortRps, 1),
          round(x.mixed.rps / x.allShortRps, 3),
          x.inProcessIdeal && round(x.inProcessIdeal.idealRatio, 3),
          ms(x.mixed.latency.p50),
          ms(x.mixed.latency.p99),
          ms(allShort?.load.latency.p99),
          round(x.mixed.server.batchMean, 1),
          x.mixed.errors,
        ];
      }),
    ),
    '',
  );
  return out;
}

/** The workers' memory by workload. */
function memoryLines(r: BenchResults): string[] {
  const out: string[] = [];
  const memoryRows = workerMemoryRows(r);
  if (memoryRows.length) {
    out.push(
      "Worker memory by workload (MiB): the peak (VmHWM, its high-water mark reset as each point starts) over the workload's points,",
      "above what the worker held as the workload started (ONNX Runtime's arena keeps what its largest call took). docs/memory.md explains them.",
      table(['model', 'workload', 'RSS at start', 'peak', 'req/s'], memoryRows),
      '',
    );
  }
  return out;
}

/** The soak (open loop): what was answered and refused, latency, memory, collections and the timeline. */
function soakLines(s: NonNullable<BenchResults['soak']>): string[] {
  const out: string[] = [];
  out.push(
    `Soak (open loop): ${short(s.model)} ${s.tokens} tok at ${s.targetRate} req/s offered (measured capacity ${round(s.capacityRps, 1)} req/s x ${round(s.targetRate / s.capacityRps, 2)}), ` +
      `${s.seconds} s after ${s.warmupSeconds} s warm-up; MAX_QUEUE_DEPTH=${s.queueDepth ?? '?'} REQUEST_TIMEOUT_MS=${s.timeoutMs ?? '?'}`,
  );
  out.push(
    table(
      [
        'sent/s',
        '200',
        '503',
        '504',
        'other',
        'sock err',
        '200 req/s',
        '200 p50',
        '200 p99',
        '503 p50',
        '503 p99',
        'RSS start',
        'RSS end',
        'RSS max',
        'after',
        'then',
        'cpu gw/wk/rd/bn/oth',
      ],
      [
        [
          round(s.load.sentPerSec, 1),
          s.counts.ok,
          s.counts.shed,
          s.counts.timeout,
          s.counts.other,
          s.counts.socketErrors,
          round(s.load.rps, 1),
          ms(s.acceptedLatency.p50),
          ms(s.acceptedLatency.p99),
          ms(s.shedLatency.p50),
          ms(s.shedLatency.p99),
          s.rss.start,
          s.rss.end,
          s.rss.max,
          s.rss.afterDrain,
          s.recoveredStatus,
          cpuCell({ model: s.model, tokens: s.tokens, concurrency: 0, kind: 'sweep', load: s.load }),
        ],
      ],
      0,
    ),
    '(RSS in MiB; "after": 2 s after the load stopped; "then": status of one request after the soak)',
  );
  if (s.gatewayGc) {
    const pauses = (what: string, gc: GcWindow) =>
      `${what} ${gc.collections}, ${round(gc.meanPauseMs, 2)} ms each on average, ${round(gc.pausedShare * 100, 2)}% of the time`;
    const { minor, major, incremental } = s.gatewayGc;
    out.push(
      `Gateway collections in the window: ${pauses('young-generation', minor)}; ${pauses('full (final pause)', major)}; ${pauses('incremental marking steps', incremental)}.`,
    );
  }
  if (s.redisMiB)
    out.push(
      `Redis used_memory: ${s.redisMiB.start} MiB when the measured window started, ${s.redisMiB.end} MiB at its end.`,
    );
  out.push(
    `Load shape: autocannon overallRate, one request per connection per second, ${STAGGERED_INSTANCES} instances whose one-second windows open ${round(1000 / STAGGERED_INSTANCES, 1)} ms apart.`,
    ...soakTimeline(s),
    '',
  );
  return out;
}

/** The gateway alone: its CPU per request, answering for a model nobody serves. */
function gatewayAloneLines(g: BenchResults['gatewayCost']): string[] {
  if (!g) return [];
  return [
    `Gateway alone (POST for an unserved model, answered ${g.status}; c=${g.concurrency}): ${round(g.perSec, 0)} answers/s, p50 ${ms(g.p50)} ms, p99 ${ms(g.p99)} ms, ` +
      `gateway CPU ${g.gatewayCpuPct}% of a core = ${round(g.cpuMsPerRequest, 3)} ms CPU per request`,
    '',
  ];
}

/** Each target, passed, failed or skipped. */
function targetLines(r: BenchResults): string[] {
  const out: string[] = [];
  out.push('Targets');
  for (const t of r.targets)
    out.push(`  ${t.pass === null ? 'SKIP' : t.pass ? 'PASS' : 'FAIL'}  ${t.name}\n        ${t.detail}`);
  return out;
}

export function formatReport(r: BenchResults): string {
  const sweep = r.points.filter((p) => p.kind === 'sweep');
  return [
    ...headerLines(r),
    ...sweepLines(r, sweep),
    ...baselineLines(r),
    ...batchingGainLines(r, sweep),
    ...mixedLines(r, sweep),
    ...memoryLines(r),
    ...(r.soak ? soakLines(r.soak) : []),
    ...gatewayAloneLines(r.gatewayCost),
    ...targetLines(r),
  ].join('\n');
}

export function writeResults(dir: string, r: BenchResults): { json: string; latest: string } {
  fs.mkdirSync(dir, { recursive: true });
  const stamp = r.meta.startedAt.replace(/[:.]/g, '-');
  const json = path.join(dir, `${stamp}.json`);
  const latest = path.join(dir, 'latest.json');
  const text = JSON.stringify(r, null, 2);
  fs.writeFileSync(json, text);
  fs.writeFileSync(latest, text);
  return { json, latest };
}
