import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from 'pino';
import type { WorkerConfig } from '@tserve/config';
import type { WorkerInfo } from '@tserve/contract';
import { localModelFolder, ModelLoadError, type Runtime, type SessionFile } from '../model/model.js';
import { hubFilePlan } from '../model/hub-files.js';
import { dtypeFile, int8RowSource } from '../model/device.js';
import { int8RowWeights, OnnxFormatError, ProtobufError, RewriteError } from '../model/int8-row/index.js';
import { fetchModel, hubSettings, sha256File } from '../model/download.js';

/**
 * The file the model thread loads, and its dtype. int8-row is written from the model's fp32 (else
 * q8) file at first load and cached beside it; `describe` names what runs, for /ready and the log.
 * A file the rewrite cannot take (no MatMul it knows) runs as it is when DTYPE=auto chose int8-row,
 * and fails the load when DTYPE=int8-row asked for it.
 */
export async function weightsToLoad(
  config: WorkerConfig,
  runtime: Runtime,
  source: ModelSource,
  logger: Logger,
): Promise<{
  dtype: Runtime['dtype'];
  dir: string;
  file: SessionFile;
  describe: string;
  sha256?: string;
  /** Why int8-row, which DTYPE=auto chose, is not what runs. */
  fallback?: string;
}> {
  const model = config.MODEL;
  const asItIs = (dtype: Exclude<Runtime['dtype'], 'int8-row'>) => ({
    dtype,
    dir: source.dir,
    file: { dtype },
    describe: dtypeFile(dtype),
  });
  if (runtime.dtype !== 'int8-row') return asItIs(runtime.dtype);
  const onnx = path.join(source.dir, 'onnx');
  const from = int8RowSource(fs.existsSync(onnx) ? fs.readdirSync(onnx) : []);
  const file = dtypeFile(from);
  try {
    const sha256 = source.sha256.get(file) ?? (await sha256File(path.join(source.dir, file)));
    const started = performance.now();
    const rows = await int8RowWeights(source.dir, { file, sha256, from }, hubSettings(config).cacheDir);
    const to = path.join(rows.dir, rows.file);
    if (rows.written)
      logger.info(
        { from: file, to, ...rows.written, ms: Math.round(performance.now() - started) },
        'wrote the int8-row file',
      );
    else logger.info({ from: file, to }, 'int8-row file found in the cache');
    return {
      dtype: 'int8-row',
      dir: rows.dir,
      file: { dtype: 'fp32', fileName: rows.fileName },
      describe: `${file}+${rows.rewrite}`,
      sha256: rows.sha256,
    };
  } catch (err) {
    if (err instanceof RewriteError && config.DTYPE === 'auto') {
      logger.warn({ file, reason: err.message }, 'int8-row cannot be written from this file; running it as it is');
      return {
        ...asItIs(from),
        fallback: `int8-row cannot be written from ${file} (${err.message}); it runs as ${from}`,
      };
    }
    if (
      err instanceof RewriteError ||
      err instanceof OnnxFormatError ||
      err instanceof ProtobufError ||
      (err as NodeJS.ErrnoException).code
    ) {
      throw new ModelLoadError(`cannot load model "${model}" as int8-row from ${file}: ${(err as Error).message}`);
    }
    throw err;
  }
}

export interface ModelSource {
  /** The folder the model is loaded from. */
  dir: string;
  /** The hub revision (its commit, where the hub named one); none for MODEL_DIR. */
  revision?: string;
  /** sha256 of the files downloaded by this start. */
  sha256: Map<string, string>;
  /** Time spent getting the files from the hub (resolving and downloading). */
  downloadMs: number;
}

/** MODEL_DIR's folder for the model, or its snapshot in the hub cache, downloaded as needed. */
export async function locateModel(config: WorkerConfig, info: WorkerInfo, logger: Logger): Promise<ModelSource> {
  if (config.MODEL_DIR)
    return { dir: localModelFolder(config.MODEL_DIR, config.MODEL), sha256: new Map(), downloadMs: 0 };
  const started = performance.now();
  const hub = hubSettings(config);
  logger.info(
    { endpoint: hub.endpoint, revision: hub.revision, cache: hub.cacheDir, offline: hub.offline },
    'getting the model from the hub',
  );
  const fetched = await fetchModel(
    config.MODEL,
    hub,
    hubFilePlan(config),
    (download) => (info.download = download),
    logger,
  );
  info.revision = fetched.revision;
  return {
    dir: fetched.dir,
    revision: fetched.revision,
    sha256: fetched.sha256,
    downloadMs: performance.now() - started,
  };
}
