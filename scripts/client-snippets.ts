/**
 * Runs the Python snippets of docs/clients.md against a running system: `npm run clients`
 * (the system the README starts, at localhost:8000 and, for gRPC, localhost:8001), or
 * `npm run clients -- --url <gateway> --grpc <host:port>`.
 * A snippet whose packages are not installed is skipped, naming them; one that fails prints its
 * error. PYTHON names the interpreter (default: python3, an activated venv's).
 * test/client-snippets.test.ts runs the same snippets against its own system.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const DOC = 'docs/clients.md';
/** The addresses the snippets are written for: HTTP's, and gRPC's. */
const DOC_ADDRESS = { http: 'localhost:8000', grpc: 'localhost:8001' };
export type Addresses = typeof DOC_ADDRESS;

export interface Snippet {
  /** Where it is: file and line. */
  where: string;
  code: string;
  /** The modules it imports (`tritonclient.grpc`: a package's part may be what is missing). */
  modules: string[];
}

export type Outcome =
  { status: 'passed' } | { status: 'skipped'; missing: string[] } | { status: 'failed'; output: string };

/** The Python blocks of docs/clients.md, in order. */
export function pythonSnippets(): Snippet[] {
  const lines = fs.readFileSync(path.join(ROOT, DOC), 'utf8').split('\n');
  const snippets: Snippet[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].trim() !== '```python') continue;
    const start = i + 1;
    while (++i < lines.length && lines[i].trim() !== '```');
    const code = lines.slice(start, i).join('\n');
    const modules = [...new Set([...code.matchAll(/^(?:from|import) ([A-Za-z_][\w.]*)/gm)].map((m) => m[1]))];
    snippets.push({ where: `${DOC}:${start}`, code, modules });
  }
  return snippets;
}

/** Runs one snippet against the gateway at `address` (host:port each); skipped where a module it imports is missing. */
export async function runSnippet(
  snippet: Snippet,
  address: Addresses,
  python = process.env.PYTHON ?? 'python3',
): Promise<Outcome> {
  const missing: string[] = [];
  for (const module of snippet.modules) {
    await run(python, ['-c', `import ${module}`]).catch(() => missing.push(module));
  }
  if (missing.length) return { status: 'skipped', missing };
  try {
    const code = snippet.code.replaceAll(DOC_ADDRESS.http, address.http).replaceAll(DOC_ADDRESS.grpc, address.grpc);
    await run(python, ['-c', code], { timeout: 120_000 });
    return { status: 'passed' };
  } catch (err) {
    const { stdout = '', stderr = '', message } = err as Error & { stdout?: string; stderr?: string };
    return { status: 'failed', output: `${stdout}${stderr}`.trim() || message };
  }
}

async function main(): Promise<void> {
  const option = (name: string) => {
    const at = process.argv.indexOf(name);
    return at > 0 ? process.argv[at + 1].replace(/^https?:\/\//, '').replace(/\/$/, '') : undefined;
  };
  const address = { http: option('--url') ?? DOC_ADDRESS.http, grpc: option('--grpc') ?? DOC_ADDRESS.grpc };
  let failed = 0;
  for (const snippet of pythonSnippets()) {
    const outcome = await runSnippet(snippet, address);
    if (outcome.status === 'passed') console.log(`passed   ${snippet.where}`);
    else if (outcome.status === 'skipped')
      console.log(`skipped  ${snippet.where}: pip install what provides ${outcome.missing.join(', ')}`);
    else {
      failed++;
      console.log(`FAILED   ${snippet.where}\n${outcome.output}\n`);
    }
  }
  process.exitCode = failed ? 1 : 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) await main();
