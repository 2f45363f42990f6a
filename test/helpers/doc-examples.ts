/**
 * The examples of README.md and docs/ (the conventions are in test/docs.test.ts, which runs them):
 * found here, and run here with the real curl, for every test that sends them.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { ROOT } from './system.ts';

const run = promisify(execFile);

const NOT_RUN = /^<!-- docs-test: not run\b.*-->$/;
const SHOWN = /^# (?:(\d{3}) )?([[{].*)$/;
const DOC_PORT = 'localhost:8000';

interface Block {
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  lang: string;
  notRun: boolean;
  lines: string[];
}

export interface Example {
  /** Where the command starts, as file:line. */
  where: string;
  command: string;
  shown?: { status?: number; body: string };
}

function blocks(file: string): Block[] {
  const lines = fs.readFileSync(path.join(ROOT, file), 'utf8').split('\n');
  const found: Block[] = [];
  let lastText = '';
  for (let i = 0; i < lines.length; i++) {
    const fence = /^```(\S*)/.exec(lines[i]);
    if (!fence) {
      if (lines[i].trim()) lastText = lines[i].trim();
      continue;
    }
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !lines[i].startsWith('```'); i++) body.push(lines[i]);
    found.push({ file, line: start + 1, lang: fence[1], notRun: NOT_RUN.test(lastText), lines: body });
    lastText = '';
  }
  return found;
}

function examplesOf(block: Block): Example[] {
  const examples: Example[] = [];
  const { lines } = block;
  for (let i = 0; i < lines.length;) {
    if (!lines[i].trim() || lines[i].trimStart().startsWith('#')) {
      i++;
      continue;
    }
    const where = `${block.file}:${block.line + 1 + i}`;
    let command = lines[i++];
    while (command.endsWith('\\') && i < lines.length) command += `\n${lines[i++]}`;
    const shown = SHOWN.exec(lines[i] ?? '');
    examples.push({
      where,
      command,
      shown: shown ? { status: shown[1] ? Number(shown[1]) : undefined, body: shown[2] } : undefined,
    });
  }
  return examples;
}

/** README.md and every Markdown file under docs/. */
function docFiles(): string[] {
  const docs = fs.existsSync(path.join(ROOT, 'docs'))
    ? (fs.readdirSync(path.join(ROOT, 'docs'), { recursive: true }) as string[])
    : [];
  return [
    'README.md',
    ...docs
      .filter((f) => f.endsWith('.md'))
      .map((f) => path.join('docs', f))
      .sort(),
  ];
}

/** The MODEL list of the README's set-up command. */
export function readmeModels(): string[] {
  const setup = blocks('README.md').find((b) => b.lang === 'sh' && b.lines.some((l) => l.includes('npm start')));
  const list = setup && /(?:^|\s)MODEL=(\S+)/.exec(setup.lines.join('\n'));
  assert.ok(list, 'the README has a set-up command that starts the system with MODEL=…');
  return list[1].split(',');
}

/** The examples that run, of each file that has any: README.md first, then docs/ by path. */
export function docExamples(): Array<{ file: string; examples: Example[] }> {
  return docFiles()
    .map((file) => ({ file, examples: examplesIn(file) }))
    .filter((f) => f.examples.length > 0);
}

/** The examples of one file's blocks that run. */
function examplesIn(file: string): Example[] {
  return blocks(file)
    .filter((b) => b.lang === 'sh' && !b.notRun)
    .flatMap(examplesOf);
}

/** What curl got for an example: the status, the body, and the request it made. */
export interface CurlAnswer {
  status: number;
  body: string;
  method: string;
  /** The path and query curl asked for. */
  url: URL;
  contentType: string;
}

/** Runs one example, as written, with bash and curl, against the gateway at `port`. */
export async function curlExample(example: Example, port: number): Promise<CurlAnswer> {
  assert.match(
    example.command,
    /^curl /,
    `${example.where}: not a curl call; mark its block <!-- docs-test: not run (why) -->`,
  );
  assert.ok(example.command.includes(DOC_PORT), `${example.where}: does not call ${DOC_PORT}`);
  const command = example.command.replaceAll(DOC_PORT, `127.0.0.1:${port}`);
  const script = `curl() { command curl --silent --show-error --write-out '\\n%{http_code} %{method} %{url_effective} %{content_type}' "$@"; }\n${command}`;
  const { stdout } = await run('bash', ['-c', script], { timeout: 30_000, maxBuffer: 64 * 1024 * 1024 }).catch(
    (err: Error & { stderr?: string }) => {
      throw new Error(`${example.where}: ${err.message}${err.stderr ?? ''}`);
    },
  );
  const cut = stdout.lastIndexOf('\n');
  const [, status, method, url, contentType] = /^(\d+) (\S+) (\S+) ?(.*)$/.exec(stdout.slice(cut + 1)) ?? [];
  assert.ok(status, `${example.where}: curl wrote no status: ${stdout.slice(-300)}`);
  return { status: Number(status), body: stdout.slice(0, cut), method, url: new URL(url), contentType };
}
