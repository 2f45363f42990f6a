import type { RequestHandler } from 'express';
import { Registry, collectDefaultMetrics } from 'prom-client';
import type { Snapshot } from '../serving/snapshot.js';
import { requestMetrics, type RequestMetrics } from './request-metrics.js';
import { queueMetrics, type QueueCounts } from './queue-metrics.js';
import { protectionMetrics, type BodiesHeld, type ProtectionMetrics, type UnreadCounts } from './protection-metrics.js';
import { workerMetrics } from './worker-metrics.js';
import { responseCacheMetrics, type ResponseCacheCounts } from './response-cache-metrics.js';

// The request log and the dashboard name routes as the metrics do, and import the names from here.

export interface GatewayMetrics extends RequestMetrics, ProtectionMetrics {
  /** Answers `GET /metrics`, in the Prometheus text format. */
  scrape: RequestHandler;
}

/** What the metrics read when scraped: each part counts its own events. */
export interface MetricSources {
  snapshot: Snapshot;
  transport: QueueCounts;
  bodies: BodiesHeld;
  unread: UnreadCounts;
  /** The response cache, when RESPONSE_CACHE_TTL_S turns it on; its series exist only then. */
  cache?: ResponseCacheCounts;
}

/**
 * The gateway's metrics, in a prom-client Registry of its own (`series`, not prom-client's global
 * one) so that two apps in one process, as in tests, never share or double-register series. What
 * other parts count (queue depth, workers, the breaker, abandoned requests, unread answers) is read
 * from them when scraped, so it costs nothing between scrapes.
 */
export function createMetrics({ snapshot, transport, bodies, unread, cache }: MetricSources): GatewayMetrics {
  const series = new Registry();
  collectDefaultMetrics({ register: series });
  const registers = [series];

  const requests = requestMetrics(registers);
  queueMetrics(registers, snapshot, transport);
  const refusals = protectionMetrics(registers, snapshot, bodies, unread);
  workerMetrics(registers, snapshot);
  if (cache) responseCacheMetrics(registers, cache);

  return {
    ...requests,
    ...refusals,
    async scrape(_req, res) {
      const body = await series.metrics();
      res.setHeader('content-type', series.contentType);
      res.setHeader('cache-control', 'no-store');
      res.send(body);
    },
  };
}
