import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Where the bench runs from the release archive (`tserve bench`, `tserve bench-scale`: a host with no
 * npm), the folder of its bundles, where the gateway's and the worker's are too; undefined in a checkout.
 */
const HERE = path.dirname(fileURLToPath(import.meta.url));
export const BUNDLES: string | undefined = fs.existsSync(path.join(HERE, 'gateway.js')) ? HERE : undefined;
