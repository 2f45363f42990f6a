/**
 * docs/architecture.md names the file of each concern: every path it names must exist, so that a
 * newcomer who follows it never lands on a file that was moved or removed.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** `a/{b,c}.ts` as `a/b.ts` and `a/c.ts`. */
function expand(named: string): string[] {
  const brace = /\{([^}]+)\}/.exec(named);
  if (!brace) return [named];
  return brace[1].split(',').flatMap((part) => expand(named.replace(brace[0], part)));
}

describe('docs/architecture.md', () => {
  it('names only files and folders that exist', () => {
    const text = fs.readFileSync(path.join(ROOT, 'docs/architecture.md'), 'utf8');
    const named = [...text.matchAll(/`((?:apps|packages|test|bench|scripts)\/[^`\s]*)`/g)].flatMap((m) => expand(m[1]));
    assert.ok(named.length > 20, `the document names ${named.length} paths`);
    // A name with `<task>` in it stands for any task: a pattern, not a file.
    const missing = named.filter((p) => !p.includes('<') && !fs.existsSync(path.join(ROOT, p)));
    assert.deepEqual(missing, []);
  });
});
