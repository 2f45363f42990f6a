import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { sha256File } from '../download.js';
import { parseModel, serializeModel } from './onnx.js';
import { dropSoftmaxNanGuards } from './nan-guards.js';
import { REWRITE, rowsFromFp32, rowsFromQ8, type RewriteReport } from './rewrite.js';

export { RewriteError } from './rewrite.js';
export { OnnxFormatError } from './onnx.js';
export { ProtobufError } from './protobuf.js';

/** The int8-row file a worker runs, and what it was written from. */
export interface RowWeights {
  /** The model folder to load from: the model's own, or a folder of links to it beside a cached file (see int8RowWeights). */
  dir: string;
  /** transformers.js's model_file_name for it: it loads onnx/<fileName>.onnx as an fp32 file (no suffix). */
  fileName: string;
  /** Relative to `dir`. */
  file: string;
  sha256: string;
  source: { file: string; sha256: string };
  rewrite: typeof REWRITE;
  /** What this start rewrote; undefined where the file was already there. */
  written?: RewriteReport & { nanGuards: number };
}

/** Errors of writing into a folder the worker may only read (a read-only volume, as compose and Kubernetes mount models). */
const READ_ONLY = new Set(['EROFS', 'EACCES', 'EPERM']);

/**
 * The int8-row file for a model's fp32 or q8 file, written at first load. Its name holds the
 * rewrite's version and the source's sha256, so a restart finds it and new weights or a new rewrite
 * never do. It is written beside the source (onnx/); where the model's folder is read-only, into a
 * folder under `cacheRoot` whose other entries link to the model's, so that transformers.js loads
 * it as a model folder all the same.
 */
export async function int8RowWeights(
  dir: string,
  source: { file: string; sha256: string; from: 'fp32' | 'q8' },
  cacheRoot: string,
): Promise<RowWeights> {
  const fileName = `model_${REWRITE.replaceAll('-', '_')}_${source.sha256.slice(0, 16)}`;
  const file = `onnx/${fileName}.onnx`;
  const linked = path.join(
    cacheRoot,
    'tserve-int8-row',
    `${source.sha256.slice(0, 16)}-${crypto.createHash('sha256').update(path.resolve(dir)).digest('hex').slice(0, 8)}`,
  );
  const weights = { fileName, file, source: { file: source.file, sha256: source.sha256 }, rewrite: REWRITE };
  for (const folder of [dir, linked]) {
    if (fs.existsSync(path.join(folder, file)))
      return { ...weights, dir: folder, sha256: await sha256File(path.join(folder, file)) };
  }
  const model = parseModel(await fs.promises.readFile(path.join(dir, source.file)));
  const written = {
    ...(source.from === 'fp32' ? rowsFromFp32(model) : rowsFromQ8(model)),
    nanGuards: dropSoftmaxNanGuards(model),
  };
  const bytes = serializeModel(model);
  const sha256 = crypto.createHash('sha256').update(bytes).digest('hex');
  try {
    await writeWhole(path.join(dir, file), bytes);
    return { ...weights, dir, sha256, written };
  } catch (err) {
    if (!READ_ONLY.has((err as NodeJS.ErrnoException).code ?? '')) throw err;
  }
  await linkFolder(dir, linked);
  await writeWhole(path.join(linked, file), bytes);
  return { ...weights, dir: linked, sha256, written };
}

/** Written whole under another name, then renamed: a worker starting beside this one reads the old state or the whole file. */
async function writeWhole(target: string, bytes: Uint8Array): Promise<void> {
  const partial = `${target}.${process.pid}.partial`;
  await fs.promises.writeFile(partial, bytes);
  await fs.promises.rename(partial, target);
}

/** `linked` as a model folder: a link to each of `dir`'s entries but onnx/, which is its own. */
async function linkFolder(dir: string, linked: string): Promise<void> {
  await fs.promises.mkdir(path.join(linked, 'onnx'), { recursive: true });
  for (const entry of await fs.promises.readdir(dir)) {
    if (entry === 'onnx') continue;
    await fs.promises
      .symlink(path.resolve(dir, entry), path.join(linked, entry))
      .catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'EEXIST') throw err;
      });
  }
}
