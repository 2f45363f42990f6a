/**
 * Which of the system's source files ran, and which of their functions how often, between two
 * coverage snapshots of a process started with NODE_V8_COVERAGE and the coverage-snapshots.mjs
 * preload: what one request ran in it (test/trip.test.ts; docs/architecture.md, "One request's trip").
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Proc } from './processes.ts';

/** Node's flags for a program whose coverage is read in snapshots. */
export const snapshotPreload = (root: string) => ['--import', path.join(root, 'test/helpers/coverage-snapshots.mjs')];

/** A function that ran, by its name (`(anonymous)` where it has none) and its line in its source file. */
export interface FunctionRun {
  name: string;
  /** The line of its built file (dist), where the source maps would say the source's. */
  line: number;
  count: number;
}

/** Source files (`apps/gateway/src/serving/inference.ts`) and their functions that ran. */
export type Runs = Map<string, FunctionRun[]>;

interface ScriptCoverage {
  url: string;
  functions: Array<{ functionName: string; ranges: Array<{ startOffset: number; count: number }> }>;
}

/**
 * The source file a built file of the checkout at `root` comes from (apps/<app>/dist/x.js ->
 * apps/<app>/src/x.ts), or undefined for anything else (Node's own, node_modules).
 */
function sourceOf(url: string, root: string): string | undefined {
  if (!url.startsWith('file://')) return undefined;
  const relative = path.relative(root, fileURLToPath(url));
  const match = /^((?:apps|packages)\/[^/]+)\/dist\/(.+)\.js$/.exec(relative);
  return match ? `${match[1]}/src/${match[2]}.ts` : undefined;
}

/** The line of `offset` in `file`, counted from 1 (files read once). */
const lineOf = (() => {
  const starts = new Map<string, number[]>();
  return (file: string, offset: number): number => {
    let lines = starts.get(file);
    if (!lines) {
      const text = fs.readFileSync(file, 'utf8');
      lines = [0];
      for (let i = 0; i < text.length; i++) if (text[i] === '\n') lines.push(i + 1);
      starts.set(file, lines);
    }
    let line = 0;
    while (line + 1 < lines.length && lines[line + 1] <= offset) line++;
    return line + 1;
  };
})();

/**
 * A process's coverage, one snapshot at a time: each `take` holds what ran in any of its threads
 * since the one before (the preload starts the counts over at each).
 */
export class CoverageSnapshots {
  private taken = 0;

  constructor(
    private readonly proc: Proc,
    /** The process's NODE_V8_COVERAGE folder. */
    private readonly dir: string,
    /** The checkout the process runs. */
    private readonly root: string,
  ) {}

  /** What ran since the last snapshot (since the start, for the first). */
  async take(): Promise<Runs> {
    const before = new Set(fs.readdirSync(this.dir));
    const marker = `coverage snapshot ${++this.taken}\n`;
    await new Promise<void>((resolve, reject) => {
      const stderr = this.proc.child.stderr!;
      let heard = '';
      const listen = (chunk: Buffer) => {
        heard += chunk.toString();
        if (!heard.includes(marker)) return;
        stderr.off('data', listen);
        this.proc.child.off('exit', gone);
        resolve();
      };
      const gone = () =>
        reject(new Error(`${this.proc.name} exited before its coverage snapshot:\n${this.proc.output}`));
      stderr.on('data', listen);
      this.proc.child.once('exit', gone);
      this.proc.kill('SIGUSR2');
    });
    const mine = new RegExp(`^coverage-${this.proc.pid}-`);
    const files = fs.readdirSync(this.dir).filter((name) => mine.test(name) && !before.has(name));
    const runs: Runs = new Map();
    for (const name of files) {
      const { result } = JSON.parse(fs.readFileSync(path.join(this.dir, name), 'utf8')) as {
        result: ScriptCoverage[];
      };
      for (const script of result) {
        const source = sourceOf(script.url, this.root);
        if (!source) continue;
        const ran = script.functions
          .filter((f) => f.ranges[0].count > 0)
          .map((f) => ({
            name: f.functionName || '(anonymous)',
            line: lineOf(fileURLToPath(script.url), f.ranges[0].startOffset),
            count: f.ranges[0].count,
          }));
        if (ran.length) runs.set(source, [...(runs.get(source) ?? []), ...ran]);
      }
    }
    return runs;
  }
}

/** How often the functions named `names` of `file` ran. */
export function callsOf(runs: Runs, file: string, names: readonly string[]): number {
  return (runs.get(file) ?? []).filter((f) => names.includes(f.name)).reduce((n, f) => n + f.count, 0);
}
