import type { Logger } from 'pino';
import type { ModelDownload } from '@tserve/contract';

/** How often a download logs its progress. */
const LOG_EVERY_MS = 2_000;
/** How often the heartbeat's view of the download is refreshed. */
const PUBLISH_EVERY_MS = 200;
/** The rate is measured over this window, so that the estimate follows the link as it is now. */
const RATE_WINDOW_MS = 5_000;

/** A download's progress: published for the heartbeat often, logged at a steady pace. */
export class DownloadProgress {
  total = 0;
  private bytes = 0;
  private file = '';
  private readonly started = Date.now();
  private readonly samples: Array<{ at: number; bytes: number }> = [];
  private lastPublished = 0;
  private logTimer?: NodeJS.Timeout;

  constructor(
    private readonly onProgress: (download: ModelDownload) => void,
    private readonly logger: Logger,
  ) {}

  expect(bytes: number): void {
    this.total += bytes;
  }

  startFile(file: string): void {
    this.file = file;
    this.logTimer ??= setInterval(() => this.log(), LOG_EVERY_MS).unref();
    this.publish(true);
  }

  add(bytes: number): void {
    this.bytes += bytes;
    this.publish(false);
  }

  finish(): void {
    this.stop();
    const seconds = (Date.now() - this.started) / 1000;
    this.onProgress({ ...this.state(), percent: 100, doneAt: Date.now() });
    this.logger.info(
      {
        bytes: this.bytes,
        seconds: Math.round(seconds * 10) / 10,
        bytesPerSecond: Math.round(this.bytes / Math.max(seconds, 0.001)),
      },
      'download complete',
    );
  }

  stop(): void {
    clearInterval(this.logTimer);
  }

  private publish(force: boolean): void {
    const now = Date.now();
    if (!force && now - this.lastPublished < PUBLISH_EVERY_MS) return;
    this.lastPublished = now;
    this.samples.push({ at: now, bytes: this.bytes });
    while (this.samples.length > 2 && now - this.samples[0].at > RATE_WINDOW_MS) this.samples.shift();
    this.onProgress(this.state());
  }

  private rate(): number {
    const now = Date.now();
    const first = this.samples[0];
    if (!first || now - first.at < 500) return this.bytes / Math.max((now - this.started) / 1000, 0.001);
    return Math.max(0, (this.bytes - first.bytes) / ((now - first.at) / 1000));
  }

  private state(): ModelDownload {
    const percent = this.total > 0 ? Math.min(100, Math.round((this.bytes / this.total) * 1000) / 10) : 0;
    return {
      file: this.file,
      bytes: this.bytes,
      totalBytes: this.total,
      percent,
      bytesPerSecond: Math.round(this.rate()),
    };
  }

  private log(): void {
    const s = this.state();
    const eta =
      s.bytesPerSecond > 0 && s.totalBytes > 0 ? Math.ceil((s.totalBytes - s.bytes) / s.bytesPerSecond) : undefined;
    this.logger.info(
      {
        file: s.file,
        bytes: s.bytes,
        totalBytes: s.totalBytes,
        percent: s.percent,
        bytesPerSecond: s.bytesPerSecond,
        etaSeconds: eta,
      },
      'downloading',
    );
  }
}
