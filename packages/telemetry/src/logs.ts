import { pino, type Logger } from 'pino';
import pretty from 'pino-pretty';

/**
 * The processes' loggers, the one module that builds them: JSON lines for log collectors, or, for a
 * person at a terminal, one readable line per entry, a model download drawn as a progress bar.
 */

interface LoggerOptions {
  level: string;
  /** `auto`: readable where stdout is a terminal, JSON lines elsewhere (a pipe, a file, a container's log). */
  format: 'auto' | 'json' | 'pretty';
  /** Fields every entry carries: `service` (gateway, worker) and who it is. */
  base: Record<string, string>;
}

export function createLogger({ level, format, base }: LoggerOptions): Logger {
  const readable = format === 'pretty' || (format === 'auto' && process.stdout.isTTY === true);
  if (!readable) return pino({ level, base });
  return pino(
    { level, base },
    pretty({
      // Written as it comes, as JSON lines are: a line logged just before an exit is not lost.
      sync: true,
      // Colours for a terminal only: not in a file, nor where CI variables would turn them on.
      colorize: process.stdout.isTTY === true,
      singleLine: true,
      translateTime: 'SYS:HH:MM:ss',
      // Who logged is the line's prefix; a download's figures are its bar.
      ignore: ['pid', 'hostname', ...Object.keys(base), ...DOWNLOAD_FIELDS].join(','),
      messageFormat: (log, messageKey) => `${speaker(log)}: ${readableMessage(log, messageKey)}`,
    }),
  );
}

const DOWNLOAD_FIELDS = ['file', 'bytes', 'totalBytes', 'percent', 'bytesPerSecond', 'etaSeconds', 'seconds'];

/** The process a line comes from: `gateway`, or `worker <model>`. */
function speaker(log: Record<string, unknown>): string {
  return log.service === 'worker' && typeof log.model === 'string' ? `worker ${log.model}` : String(log.service);
}

/** A line's message at a terminal: the bar for a download's progress, else the message with the download fields it has. */
export function readableMessage(log: Record<string, unknown>, messageKey: string): string {
  const string = (key: string) => (typeof log[key] === 'string' ? log[key] : '');
  const number = (key: string) => (typeof log[key] === 'number' ? log[key] : undefined);
  const text = string(messageKey);
  const bytes = number('bytes');
  if (text === 'downloading' && bytes !== undefined)
    return downloadBar({
      file: string('file'),
      bytes,
      totalBytes: number('totalBytes') ?? 0,
      bytesPerSecond: number('bytesPerSecond') ?? 0,
      etaSeconds: number('etaSeconds'),
    });
  const seconds = number('seconds');
  if (text === 'download complete' && bytes !== undefined && seconds !== undefined)
    return `download complete: ${size(bytes)} in ${duration(seconds)} (${size(number('bytesPerSecond') ?? 0)}/s)`;
  // pino-pretty hides the bar's fields on every line; another line that has them (a resumed
  // download's file) says them here.
  const own = DOWNLOAD_FIELDS.filter((key) => log[key] !== undefined).map(
    (key) => `${key}=${JSON.stringify(log[key])}`,
  );
  return own.length > 0 ? `${text} (${own.join(' ')})` : text;
}

const BAR_WIDTH = 24;

/** `downloading model.onnx [██████░░░…]  52%  98.2 MB of 190.0 MB  11.3 MB/s  8 s left` */
export function downloadBar(d: {
  file: string;
  bytes: number;
  totalBytes: number;
  bytesPerSecond: number;
  etaSeconds?: number;
}): string {
  const share = d.totalBytes > 0 ? Math.min(1, d.bytes / d.totalBytes) : 0;
  const filled = Math.round(share * BAR_WIDTH);
  const bar = `[${'█'.repeat(filled)}${'░'.repeat(BAR_WIDTH - filled)}]`;
  const left = d.etaSeconds === undefined ? 'time left unknown' : `${duration(d.etaSeconds)} left`;
  const of = d.totalBytes > 0 ? `${size(d.bytes)} of ${size(d.totalBytes)}` : size(d.bytes);
  const percent = `${Math.floor(share * 100)}%`.padStart(4);
  return `downloading ${d.file} ${bar} ${percent}  ${of}  ${size(d.bytesPerSecond)}/s  ${left}`;
}

/** Bytes in decimal units, as download tools and the hub show them. */
function size(bytes: number): string {
  if (bytes < 1000) return `${bytes} B`;
  const units = ['kB', 'MB', 'GB', 'TB'];
  let value = bytes / 1000;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

function duration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}
