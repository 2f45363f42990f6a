import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { int8RowSource, dtypeFile } from '../../apps/worker/src/model/device.ts';
import { sha256File } from '../../apps/worker/src/model/download.ts';
import { int8RowWeights } from '../../apps/worker/src/model/int8-row/index.ts';

/**
 * A model's int8-row file as a worker writes it, but in a folder of links to the model's files, so
 * that the models folder (often shared, or read-only) is left as it is.
 */
export async function int8RowModel(
  modelDir: string,
  model: string,
  writtenFrom?: 'fp32' | 'q8',
): Promise<{ modelDir: string; fileName: string }> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-int8-row-'));
  const from = path.join(modelDir, model);
  const to = path.join(root, model);
  fs.mkdirSync(path.join(to, 'onnx'), { recursive: true });
  for (const entry of fs.readdirSync(from, { withFileTypes: true }))
    if (!entry.isDirectory()) fs.symlinkSync(path.join(from, entry.name), path.join(to, entry.name));
  const available = fs.readdirSync(path.join(from, 'onnx'));
  for (const file of available) fs.symlinkSync(path.join(from, 'onnx', file), path.join(to, 'onnx', file));
  // `writtenFrom`: a bench comparing the two sources; a worker always takes int8RowSource's.
  const source = writtenFrom ?? int8RowSource(available);
  const file = dtypeFile(source);
  const rows = await int8RowWeights(
    to,
    { file, sha256: await sha256File(path.join(to, file)), from: source },
    path.join(root, 'cache'),
  );
  return { modelDir: root, fileName: rows.fileName };
}
