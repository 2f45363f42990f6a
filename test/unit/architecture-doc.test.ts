/**
 * docs/architecture.md names the file of each concern: every path it names must exist, so that a
 * newcomer who follows it never lands on a file that was moved or removed.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

const ROOT = path.resolve(import.meta.dirname, '../..');
const TEXT = fs.readFileSync(path.join(ROOT, 'docs/architecture.md'), 'utf8');

/** `a/{b,c}.ts` as `a/b.ts` and `a/c.ts`. */
function expand(named: string): string[] {
  const brace = /\{([^}]+)\}/.exec(named);
  if (!brace) return [named];
  return brace[1].split(',').flatMap((part) => expand(named.replace(brace[0], part)));
}

/** The document's section under `heading`, up to the next heading of its level. */
function section(heading: string): string {
  const start = TEXT.indexOf(`\n## ${heading}\n`);
  assert.ok(start >= 0, `no section "${heading}"`);
  const end = TEXT.indexOf('\n## ', start + 1);
  return TEXT.slice(start, end < 0 ? undefined : end);
}

// A name with `<task>` in it stands for any task: a pattern, not a file.
const isPattern = (named: string) => named.includes('<');

describe('docs/architecture.md', () => {
  it('names only files and folders that exist', () => {
    const named = [...TEXT.matchAll(/`((?:apps|packages|test|bench|scripts)\/[^`\s]*)`/g)].flatMap((m) => expand(m[1]));
    assert.ok(named.length > 20, `the document names ${named.length} paths`);
    const missing = named.filter((p) => !isPattern(p) && !fs.existsSync(path.join(ROOT, p)));
    assert.deepEqual(missing, []);
  });

  it('walks one request through files that exist, gateway then worker', () => {
    const walk = section("One request's trip");
    // Its steps name files of the app's sources: the gateway's until one says "Worker:", then the worker's, until "Gateway:".
    let app = 'gateway';
    const missing: string[] = [];
    let files = 0;
    let inStep = false;
    for (const line of walk.split('\n')) {
      // A numbered step and the indented lines that continue it.
      inStep = /^\d+\. /.test(line) || (inStep && line.startsWith('   '));
      if (!inStep) continue;
      if (/^\d+\. Worker:/.test(line)) app = 'worker';
      if (/^\d+\. Gateway:/.test(line)) app = 'gateway';
      for (const [, named] of line.matchAll(/`([a-z-]+\/[^`\s]+\.ts)`/g)) {
        files++;
        // A package's file is named from the checkout's root, an app's from its sources.
        const where = named.startsWith('packages/')
          ? path.join(ROOT, named)
          : path.join(ROOT, 'apps', app, 'src', named);
        if (!isPattern(named) && !fs.existsSync(where)) missing.push(`${app}: ${named}`);
      }
    }
    assert.ok(files >= 10, `the walk names ${files} files`);
    assert.deepEqual(missing, []);
  });
});
