/**
 * A model folder where every replica a test names has onnx/model.onnx: the one the replica ships,
 * else one written from its q8 file by scripts/fp32-from-q8.py (float MatMuls on the q8 weights).
 * The shared folder stays as it is; the new one links to its files.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MODEL_DIR, ROOT } from './processes.ts';

/** Debian's python3-onnx installs for the system Python, not for any other python3 on the PATH. */
const PYTHON = fs.existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

/** A model folder of links to the shared folder's files: a worker may write beside them (its int8-row cache), the shared folder stays as it is. */
export function linkedModelDir(
  models: string[],
  options: { q8Only?: boolean } = {},
): { dir: string; remove: () => void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-models-'));
  for (const model of models) {
    const from = path.join(MODEL_DIR, model);
    const to = path.join(dir, model);
    fs.mkdirSync(path.join(to, 'onnx'), { recursive: true });
    // Files, and a sentence-transformers folder's module folders (1_Pooling/): all but onnx/, made below.
    for (const entry of fs.readdirSync(from, { withFileTypes: true })) {
      if (entry.name !== 'onnx') fs.symlinkSync(path.join(from, entry.name), path.join(to, entry.name));
    }
    // q8Only: a folder of models that ship only a q8 export, whatever else the shared folder has.
    const files = fs
      .readdirSync(path.join(from, 'onnx'))
      .filter((file) => !options.q8Only || file === 'model_quantized.onnx');
    for (const file of files) fs.symlinkSync(path.join(from, 'onnx', file), path.join(to, 'onnx', file));
  }
  return { dir, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

export function fp32ModelDir(models: string[]): { dir: string; remove: () => void } {
  const linked = linkedModelDir(models);
  for (const model of models) {
    const from = path.join(MODEL_DIR, model);
    const to = path.join(linked.dir, model);
    if (!fs.existsSync(path.join(to, 'onnx/model.onnx'))) {
      execFileSync(
        PYTHON,
        [
          path.join(ROOT, 'scripts/fp32-from-q8.py'),
          path.join(from, 'onnx/model_quantized.onnx'),
          path.join(to, 'onnx/model.onnx'),
        ],
        {
          stdio: 'pipe',
        },
      );
    }
  }
  return linked;
}
