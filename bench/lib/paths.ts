import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const BENCH_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ROOT = path.resolve(BENCH_ROOT, '..');
/** The same default as the tests: the shared models folder beside the checkout. */
export const MODEL_DIR_DEFAULT = path.resolve(process.env.MODEL_DIR ?? path.join(ROOT, '../shared/models'));
