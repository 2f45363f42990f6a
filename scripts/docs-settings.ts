/**
 * Rewrites the settings tables of docs/configuration.md from the declarations in packages/config,
 * the source of every `--help` too (`npm run docs:settings`). A unit test fails while the two differ.
 */
import fs from 'node:fs';
import { formatSettingsMarkdown } from '@tserve/config';

const START = '<!-- settings: generated from packages/config by npm run docs:settings -->';
const END = '<!-- /settings -->';

const path = new URL('../docs/configuration.md', import.meta.url);
const doc = fs.readFileSync(path, 'utf8');
const start = doc.indexOf(START);
const end = doc.indexOf(END);
if (start < 0 || end < start) throw new Error(`docs/configuration.md lacks the settings markers ${START} … ${END}`);
fs.writeFileSync(path, `${doc.slice(0, start + START.length)}\n\n${formatSettingsMarkdown()}\n\n${doc.slice(end)}`);
