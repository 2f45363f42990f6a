/**
 * A worker without MODEL_DIR gets its model's files here, from the hub or a mirror (HF_ENDPOINT),
 * into huggingface_hub's cache layout, and then loads them from that local folder exactly as it
 * loads a MODEL_DIR model.
 *
 * The worker does not let transformers.js fetch for it: transformers.js sends HF_TOKEN to
 * huggingface.co and hf.co only (never to a mirror), keys its cache by the revision's name (a
 * cached `main` is never looked at again, and the commit it was is never known), reports progress
 * without a rate, and has no offline mode that says what is missing.
 *
 * Each file arrives whole or not at all (file-download.ts), through requests that send HF_TOKEN to
 * HF_ENDPOINT's origin only (hub-client.ts).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Logger } from 'pino';
import type { WorkerConfig } from '@tserve/config';
import type { ModelDownload } from '@tserve/contract';
import { ModelLoadError } from './model.js';
import type { PlanFiles } from './hub-files.js';
import { DownloadProgress } from './download-progress.js';
import { downloadFile } from './file-download.js';
import { CONFIG, HubClient, Unreachable, type FileMeta, type HubSettings } from './hub-client.js';

export interface FetchedModel {
  /** The local folder holding the model's files. */
  dir: string;
  /** The commit the revision resolved to, where the server named one; else the revision asked for. */
  revision: string;
  /** sha256 of each file downloaded by this start, computed as it arrived. */
  sha256: Map<string, string>;
}

/** Files every model served here needs, besides its config (CONFIG), before its weights can be chosen. */
const TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json'];
const COMMIT = /^[0-9a-f]{40}$/;
// The hub's own rule: letters, digits, '.', '_' and '-', an optional namespace, never '--' or '..'.
const REPO_ID = /^(?:[A-Za-z0-9][A-Za-z0-9._-]*\/)?[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** The hub settings of a worker's config, the cache folder resolved as huggingface_hub resolves it. */
export function hubSettings(config: WorkerConfig): HubSettings {
  const home = config.HF_HOME ?? path.join(os.homedir(), '.cache', 'huggingface');
  return {
    endpoint: config.HF_ENDPOINT,
    revision: config.MODEL_REVISION,
    token: config.HF_TOKEN,
    cacheDir: path.resolve(config.HF_HUB_CACHE ?? path.join(home, 'hub')),
    offline: config.HF_HUB_OFFLINE,
  };
}

/** sha256 (hex) of a file, read as a stream. */
export async function sha256File(file: string): Promise<string> {
  const hash = crypto.createHash('sha256');
  for await (const chunk of fs.createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/**
 * Makes the model's files present in the cache and says where they are. Online, the revision is
 * resolved to its commit first, and only the files the cache lacks for that commit are fetched.
 */
export async function fetchModel(
  model: string,
  hub: HubSettings,
  plan: PlanFiles,
  onProgress: (download: ModelDownload) => void,
  logger: Logger,
): Promise<FetchedModel> {
  if (!REPO_ID.test(model) || model.includes('--') || model.includes('..')) {
    throw new ModelLoadError(
      `cannot load model "${model}" from the hub: not a model id (<org>/<name>: letters, digits, ".", "_" and "-")`,
    );
  }
  return new HubFetch(model, hub, plan, onProgress, logger).run();
}

class HubFetch {
  private readonly repoDir: string;
  private readonly client: HubClient;

  constructor(
    private readonly model: string,
    private readonly hub: HubSettings,
    private readonly plan: PlanFiles,
    private readonly onProgress: (download: ModelDownload) => void,
    private readonly logger: Logger,
  ) {
    this.repoDir = path.join(hub.cacheDir, `models--${model.split('/').join('--')}`);
    this.client = new HubClient(model, hub);
  }

  async run(): Promise<FetchedModel> {
    if (this.hub.offline) return this.fromCache('HF_HUB_OFFLINE=1');
    let resolved: { commit?: string; meta: FileMeta };
    try {
      resolved = await this.resolve();
    } catch (err) {
      if (!(err instanceof Unreachable)) throw err;
      // As huggingface_hub does: a model already in the cache still starts while the hub is down.
      const cached = this.cachedSnapshot();
      if (!cached)
        throw this.client.failure(
          `cannot reach it (${err.message}), and the revision is not in the cache at ${this.hub.cacheDir}`,
        );
      this.logger.warn(
        { endpoint: this.hub.endpoint, reason: err.message, revision: cached.revision },
        'cannot reach the hub; loading the model from the cache',
      );
      return this.fromCache(`the hub unreachable (${err.message})`);
    }
    const revision = resolved.commit ?? this.hub.revision;
    const dir = path.join(this.repoDir, 'snapshots', revision);
    await fsp.mkdir(dir, { recursive: true });
    if (resolved.commit && resolved.commit !== this.hub.revision) await this.writeRef(resolved.commit);

    const progress = new DownloadProgress(this.onProgress, this.logger);
    try {
      return { dir, revision, sha256: await this.fill(revision, dir, resolved.meta, progress) };
    } catch (err) {
      throw err instanceof Unreachable ? this.client.failure(`lost the connection (${err.message})`) : err;
    } finally {
      progress.stop();
    }
  }

  /**
   * Fetches what the revision's snapshot folder lacks: its config first, then the files the config
   * calls for. Returns the sha256 of each file it fetched.
   */
  private async fill(
    revision: string,
    dir: string,
    configMeta: FileMeta,
    progress: DownloadProgress,
  ): Promise<Map<string, string>> {
    const sha256 = new Map<string, string>();
    const fetchFile = async (file: string, meta: FileMeta) =>
      sha256.set(file, await downloadFile(this.client, { revision, file, meta, dir }, progress, this.logger));
    // The config decides which weights to fetch; it is small, and fetched first.
    if (!fs.existsSync(path.join(dir, CONFIG))) {
      progress.expect(configMeta.size ?? 0);
      await fetchFile(CONFIG, configMeta);
    }
    const queue = await this.lacking(revision, dir);
    if (queue.length === 0) {
      if (sha256.size) progress.finish();
      return sha256;
    }
    progress.expect(queue.reduce((n, [, meta]) => n + (meta.size ?? 0), 0));
    this.logger.info(
      {
        endpoint: this.hub.endpoint,
        revision,
        files: queue.map(([file]) => file),
        bytes: progress.total,
        cache: this.hub.cacheDir,
      },
      'downloading the model',
    );
    for (const [file, meta] of queue) await fetchFile(file, meta);
    progress.finish();
    return sha256;
  }

  /**
   * The files the snapshot folder lacks, with what the server says of each: the tokenizer's and
   * those the config's plan requires, then its optional ones that the server has.
   */
  private async lacking(revision: string, dir: string): Promise<Array<[string, FileMeta]>> {
    const modelConfig = readConfig(dir);
    const heads = new Map<string, FileMeta | undefined>();
    const head = async (file: string) => {
      if (!heads.has(file)) heads.set(file, await this.client.head(revision, file, false));
      return heads.get(file) !== undefined;
    };
    const { required, optional } = await this.plan(modelConfig, (file) =>
      fs.existsSync(path.join(dir, file)) ? Promise.resolve(true) : head(file),
    );
    const wanted = [...TOKENIZER_FILES, ...required].filter((file) => !fs.existsSync(path.join(dir, file)));
    const metas = await Promise.all(
      wanted.map(async (file) => (heads.has(file) ? heads.get(file) : this.client.head(revision, file, true))),
    );
    const extras = await Promise.all(
      optional
        .filter((file) => !fs.existsSync(path.join(dir, file)))
        .map(
          async (file) =>
            [file, heads.has(file) ? heads.get(file) : await this.client.head(revision, file, false)] as const,
        ),
    );
    return [
      ...wanted.map((file, i) => [file, metas[i]!] as [string, FileMeta]),
      ...extras.filter((e): e is [string, FileMeta] => e[1] !== undefined),
    ];
  }

  /** The revision's commit, from what the server says of config.json. */
  private async resolve(): Promise<{ commit?: string; meta: FileMeta }> {
    const meta = await this.client.head(this.hub.revision, CONFIG, true);
    const commit = meta?.commit && COMMIT.test(meta.commit) ? meta.commit : undefined;
    return { commit, meta: meta! };
  }

  /** The snapshot folder the cache holds for the revision: through its ref, or by its own name (a commit). */
  private cachedSnapshot(): { dir: string; revision: string } | undefined {
    let revision = this.hub.revision;
    try {
      const ref = fs.readFileSync(path.join(this.repoDir, 'refs', this.hub.revision), 'utf8').trim();
      if (COMMIT.test(ref)) revision = ref;
    } catch {
      // no ref: the revision may be a commit, or a name a mirror gave no commit for
    }
    const dir = path.join(this.repoDir, 'snapshots', revision);
    return fs.existsSync(dir) ? { dir, revision } : undefined;
  }

  /** Loads from the cache alone; `why` says why the network is not used. */
  private async fromCache(why: string): Promise<FetchedModel> {
    const cached = this.cachedSnapshot();
    const missingHint = `start a worker once online, or fill the cache with \`huggingface-cli download ${this.model} --revision ${this.hub.revision} --cache-dir ${this.hub.cacheDir}\``;
    const from = `the cache at ${this.hub.cacheDir}`;
    if (!cached) throw this.client.failure(`${why}, and the revision is not in the cache: ${missingHint}`, from);
    const exists = (file: string) => fs.existsSync(path.join(cached.dir, file));
    if (!exists(CONFIG)) throw this.client.failure(`${why}, and ${cached.dir} lacks ${CONFIG}: ${missingHint}`, from);
    const { required } = await this.plan(readConfig(cached.dir), (file) => Promise.resolve(exists(file)));
    const missing = [...TOKENIZER_FILES, ...required].filter((file) => !exists(file));
    if (missing.length)
      throw this.client.failure(`${why}, and ${cached.dir} lacks ${missing.join(', ')}: ${missingHint}`, from);
    return { dir: cached.dir, revision: cached.revision, sha256: new Map() };
  }

  private async writeRef(commit: string): Promise<void> {
    const ref = path.join(this.repoDir, 'refs', this.hub.revision);
    await fsp.mkdir(path.dirname(ref), { recursive: true });
    const temp = `${ref}.${process.pid}.incomplete`;
    await fsp.writeFile(temp, commit);
    await fsp.rename(temp, ref);
  }
}

function readConfig(dir: string): Record<string, unknown> {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, CONFIG), 'utf8')) as Record<string, unknown>;
  } catch (err) {
    throw new ModelLoadError(
      `the model's ${CONFIG} in ${dir} cannot be read: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
}
