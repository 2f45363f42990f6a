/**
 * Rewrites the README's settings tables from the declarations in packages/config, the source of
 * every `--help` too (`npm run docs:settings`). A unit test fails while the two differ.
 */
import fs from 'node:fs';
import { formatSettingsMarkdown } from '@tserve/config';

const START = '<!-- settings: generated from packages/config by npm run docs:settings -->';
const END = '<!-- /settings -->';

const path = new URL('../README.md', import.meta.url);
const readme = fs.readFileSync(path, 'utf8');
const start = readme.indexOf(START);
const end = readme.indexOf(END);
if (start < 0 || end < start) throw new Error(`README.md lacks the settings markers ${START} … ${END}`);
fs.writeFileSync(path, `${readme.slice(0, start + START.length)}\n\n${formatSettingsMarkdown()}\n\n${readme.slice(end)}`);
