import { Counter, Gauge, type Registry } from 'prom-client';
import type { ApiKey } from '../admission/api-keys.js';
import type { QuotaReason } from '../admission/quotas.js';
import type { BodyBudget } from '../admission/overload.js';
import type { Snapshot } from '../serving/snapshot.js';
import type { UnreadAnswers } from '../http/unread-answers.js';

const BREAKER_STATES = ['closed', 'open', 'half-open'] as const;

/** The bytes of request bodies the gateway holds. */
export type BodiesHeld = Pick<BodyBudget, 'held'>;
/** The bytes of answers the gateway holds for clients that have not read them, and the connections it closed for them. */
export type UnreadCounts = Pick<UnreadAnswers, 'held' | 'closed'>;

export interface ProtectionMetrics {
  /** A request refused with 429, by key name (never its secret). */
  quotaRejected: (key: ApiKey, reason: QuotaReason) => void;
  /** A client connection closed on arrival: the gateway already held MAX_CONNECTIONS, or its client MAX_CONNECTIONS_PER_CLIENT. */
  connectionDropped: () => void;
}

/**
 * How the gateway guards itself: the requests and connections it refused or closed, the bytes it
 * holds against its bounds, and the state of its Redis breaker.
 */
export function protectionMetrics(
  registers: Registry[],
  snapshot: Snapshot,
  bodies: BodiesHeld,
  unread: UnreadCounts,
): ProtectionMetrics {
  const quotaRejections = new Counter({
    name: 'tserve_quota_rejections_total',
    help: 'Requests refused with 429, by API key name and the limit hit (rate or concurrency)',
    labelNames: ['key', 'reason'] as const,
    registers,
  });
  const droppedConnections = new Counter({
    name: 'tserve_connections_dropped_total',
    help: 'Client connections closed on arrival because the gateway already held MAX_CONNECTIONS, or their client address MAX_CONNECTIONS_PER_CLIENT',
    registers,
  });
  new Counter({
    name: 'tserve_unread_answers_closed_total',
    help: 'Client connections closed with their answer unread: it made no progress for HTTP_SEND_TIMEOUT_MS (stalled), or it had waited longest when the answers waiting to be read passed MAX_UNREAD_ANSWERS_BYTES (over budget)',
    labelNames: ['reason'] as const,
    registers,
    collect() {
      this.reset();
      for (const [reason, n] of Object.entries(unread.closed)) this.inc({ reason }, n);
    },
  });
  new Gauge({
    name: 'tserve_request_body_bytes_held',
    help: 'Bytes of request bodies this gateway holds now, at their declared sizes (at most MAX_BODIES_BYTES)',
    registers,
    collect() {
      this.set(bodies.held);
    },
  });
  new Gauge({
    name: 'tserve_unread_answer_bytes_held',
    help: 'Bytes of answers this gateway holds now for clients that have not read them yet (MAX_UNREAD_ANSWERS_BYTES)',
    registers,
    collect() {
      this.set(unread.held);
    },
  });
  new Gauge({
    name: 'tserve_breaker_state',
    help: 'Circuit breaker state: 1 for the current state, 0 for the others',
    labelNames: ['breaker', 'state'] as const,
    registers,
    collect() {
      const current = snapshot().breaker;
      for (const state of BREAKER_STATES) this.set({ breaker: 'redis', state }, state === current ? 1 : 0);
    },
  });
  return {
    quotaRejected(key: ApiKey, reason: QuotaReason) {
      quotaRejections.inc({ key: key.name, reason });
    },
    connectionDropped() {
      droppedConnections.inc();
    },
  };
}
