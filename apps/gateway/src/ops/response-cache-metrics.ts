import { Counter, Gauge, type Registry } from 'prom-client';
import type { ResponseCache } from '../serving/response-cache.js';

/** What the response cache counts of itself. */
export type ResponseCacheCounts = Pick<ResponseCache, 'counts' | 'bytes' | 'storedBytes'>;

/** The response cache's series: inputs answered from it and computed, and the bytes it holds. */
export function responseCacheMetrics(registers: Registry[], cache: ResponseCacheCounts): void {
  const perModel = (name: string, help: string, read: (counts: { hits: number; misses: number }) => number) =>
    new Counter({
      name,
      help,
      labelNames: ['model'] as const,
      registers,
      collect() {
        this.reset();
        for (const [model, counts] of cache.counts) this.inc({ model }, read(counts));
      },
    });
  perModel('tserve_response_cache_hits_total', 'Inputs answered from the response cache, by model', (c) => c.hits);
  perModel(
    'tserve_response_cache_misses_total',
    'Inputs looked up in the response cache and not found there (then computed), by model',
    (c) => c.misses,
  );
  new Counter({
    name: 'tserve_response_cache_stored_bytes_total',
    help: 'Bytes of entries this gateway stored in the response cache, counted as its bound counts them',
    registers,
    collect() {
      this.reset();
      this.inc(cache.storedBytes);
    },
  });
  new Gauge({
    name: 'tserve_response_cache_bytes',
    help: "Bytes the response cache holds in Redis (all gateways), as counted at this gateway's last store; RESPONSE_CACHE_MAX_MB bounds it",
    registers,
    collect() {
      this.set(cache.bytes);
    },
  });
}
