import fs from 'node:fs';

/** The worker's resident memory now and at its peak (VmHWM, where Linux reports it), in bytes. */
export function residentMemory(): { rssBytes: number; peakRssBytes?: number } {
  const rssBytes = process.memoryUsage.rss();
  try {
    const match = /^VmHWM:\s+(\d+)\s+kB/m.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    return match ? { rssBytes, peakRssBytes: Number(match[1]) * 1024 } : { rssBytes };
  } catch {
    return { rssBytes };
  }
}
