#!/usr/bin/env node
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { PRIORITIES, type Priority } from '@tserve/contract';
import { createKey, parseKeyFile, type ApiKey } from '../admission/api-keys.js';

const HELP = `tserve API keys: makes, lists and revokes keys in an API_KEYS_FILE.

Usage: npm run keys -- create --name NAME [--file keys.json] [--models a,b] [--rate N/SECONDS]
                               [--concurrency N] [--priority interactive|batch]
       npm run keys -- list --file keys.json
       npm run keys -- revoke ID --file keys.json

create prints the key once: only its SHA-256 is stored. With --file the entry is added to that file
(made if missing); a gateway started with API_KEYS_FILE=<file> picks the change up within a second,
without a restart. Without --file the entry is printed for you to store (e.g. in API_KEYS).
`;

function fail(message: string): never {
  process.stderr.write(`${message}\n\n${HELP}`);
  process.exit(2);
}

function readFile(file: string): ApiKey[] {
  return fs.existsSync(file) ? parseKeyFile(fs.readFileSync(file, 'utf8'), file) : [];
}

/** Replaces the file in one step, so a gateway watching it never reads half a file. */
function writeFile(file: string, keys: ApiKey[]): void {
  const temp = path.join(path.dirname(path.resolve(file)), `.${path.basename(file)}.${process.pid}.tmp`);
  fs.writeFileSync(temp, `${JSON.stringify({ keys }, null, 2)}\n`, { mode: 0o600 });
  fs.renameSync(temp, file);
}

function main(argv: string[]): void {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      name: { type: 'string' },
      file: { type: 'string' },
      models: { type: 'string' },
      rate: { type: 'string' },
      concurrency: { type: 'string' },
      priority: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const [command, id] = positionals;
  if (values.help || !command) {
    process.stdout.write(HELP);
    return;
  }
  if (command === 'create') {
    if (!values.name) fail('create needs --name');
    const rate = values.rate === undefined ? undefined : /^(\d+)\/(\d+)$/.exec(values.rate);
    if (values.rate !== undefined && !rate) fail('--rate is REQUESTS/SECONDS, e.g. 100/60');
    const concurrency = values.concurrency === undefined ? undefined : Number(values.concurrency);
    if (concurrency !== undefined && !(Number.isInteger(concurrency) && concurrency > 0))
      fail('--concurrency is a positive integer');
    if (values.priority !== undefined && !(PRIORITIES as readonly string[]).includes(values.priority))
      fail(`--priority is one of ${PRIORITIES.join(', ')}`);
    const { token, entry } = createKey({
      name: values.name,
      models: values.models
        ? values.models
            .split(',')
            .map((m) => m.trim())
            .filter(Boolean)
        : ['*'],
      rate: rate ? { requests: Number(rate[1]), per_seconds: Number(rate[2]) } : undefined,
      concurrency,
      priority: (values.priority as Priority | undefined) ?? 'interactive',
    });
    if (values.file) {
      writeFile(values.file, [...readFile(values.file), entry]);
      process.stderr.write(`added key ${entry.id} (${entry.name}) to ${values.file}\n`);
    } else {
      process.stderr.write(`store this entry in your keys JSON ({"keys": [...]}):\n${JSON.stringify(entry)}\n`);
    }
    process.stderr.write('the key, shown only now:\n');
    process.stdout.write(`${token}\n`);
    return;
  }
  if (!values.file) fail(`${command} needs --file`);
  const keys = readFile(values.file);
  if (command === 'list') {
    for (const k of keys) {
      const limits = [
        k.rate && `${k.rate.requests}/${k.rate.per_seconds}s`,
        k.concurrency && `${k.concurrency} in flight`,
      ]
        .filter(Boolean)
        .join(', ');
      process.stdout.write(
        `${k.id}  ${k.name}  models=${k.models.join(',')}  ${k.priority}${limits ? `  ${limits}` : ''}\n`,
      );
    }
    return;
  }
  if (command === 'revoke') {
    if (!id) fail('revoke needs the key id');
    if (!keys.some((k) => k.id === id)) fail(`no key ${id} in ${values.file}`);
    writeFile(
      values.file,
      keys.filter((k) => k.id !== id),
    );
    process.stderr.write(`revoked key ${id}\n`);
    return;
  }
  fail(`unknown command ${command}`);
}

try {
  main(process.argv.slice(2));
} catch (err) {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
