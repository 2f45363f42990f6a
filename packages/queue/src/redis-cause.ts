/**
 * What a failed Redis call says about Redis, in words a client, `/ready` and the log can all use:
 * an operator told "no live worker" or "breaker open" looks in the wrong place when Redis is full.
 */
export type RedisCause = 'out-of-memory' | 'not-answering' | 'unreachable' | 'other';

/** The cause of a failed Redis call, from its error (ioredis', Redis' own, or the breaker's timeout). */
export function redisCauseOf(err: unknown): RedisCause {
  const text = err instanceof Error ? err.message : String(err);
  // Redis's own refusal of a write under maxmemory (noeviction): "OOM command not allowed when used memory > 'maxmemory'".
  if (/\bOOM\b/.test(text)) return 'out-of-memory';
  // ioredis' commandTimeout, and the breaker's own timeout (opossum: "Timed out after N ms").
  if (/Command timed out|Timed out after/i.test(text)) return 'not-answering';
  // Also ioredis' word for a command sent as its connection dropped, and not sent again (max
  // retries), and the sentinels' while none can be reached, or a primary demoted mid-failover.
  if (
    /ECONNREFUSED|ECONNRESET|ENOTFOUND|EHOSTUNREACH|ETIMEDOUT|Connection is closed|Stream isn't writeable|connect|sentinels are unreachable|^READONLY|max retries per request/i.test(
      text,
    )
  )
    return 'unreachable';
  return 'other';
}

/** The cause, as a sentence's clause. */
export function describeRedisCause(cause: RedisCause): string {
  switch (cause) {
    case 'out-of-memory':
      return "Redis is out of memory: it refuses writes past its maxmemory (see docs/operations.md, Redis's memory)";
    case 'not-answering':
      return 'Redis is not answering: it accepts connections but replies to nothing within REDIS_COMMAND_TIMEOUT_MS (frozen or overloaded)';
    case 'unreachable':
      return 'Redis is unreachable: no connection to its primary (down, or failing over)';
    case 'other':
      return 'Redis failed a command';
  }
}

/** What a failed Redis call says about Redis, as a sentence's clause. */
export function describeRedisFailure(err: unknown): string {
  return describeRedisCause(redisCauseOf(err));
}
