import type { Redis } from 'ioredis';
import { keys } from './names.js';

/**
 * Reports this gateway's count for each model and sums the other gateways' fresh ones, in one
 * script. Every report is stamped and judged by Redis's clock (TIME), never a gateway's own: gateways
 * on hosts whose clocks disagree would otherwise ignore (and remove) each other's reports as stale.
 * KEYS: one depth hash per model. ARGV: the gateway's id, staleMs, then its count per key.
 */
const EXCHANGE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stale = tonumber(ARGV[2])
local sums = {}
for i, key in ipairs(KEYS) do
  redis.call('HSET', key, ARGV[1], ARGV[i + 2] .. '@' .. string.format('%d', now))
  redis.call('PEXPIRE', key, stale)
  local all = redis.call('HGETALL', key)
  local sum = 0
  for j = 1, #all, 2 do
    if all[j] ~= ARGV[1] then
      local count, at = string.match(all[j + 1], '^(%d+)@(%d+)$')
      if count and now - tonumber(at) <= stale then sum = sum + tonumber(count) else redis.call('HDEL', key, all[j]) end
    end
  end
  sums[i] = sum
end
return sums`;

/**
 * Each gateway reports its outstanding requests per model and reads the others', so that load
 * shedding sees the whole cluster's depth. One round trip per refresh, none per request. A report
 * older than `staleMs` (on Redis's clock) is from a gateway that stopped: it is ignored and removed.
 * Each restart is a gateway with a new id, so otherwise the hash, and every read of it, would grow
 * with every gateway that ever ran. (A live gateway that was only slow writes its report again at
 * its next refresh.)
 */
export async function exchangeDepths(
  redis: Redis,
  prefix: string,
  gatewayId: string,
  mine: Map<string, number>,
  staleMs: number,
): Promise<Map<string, number>> {
  const models = [...mine.keys()];
  if (models.length === 0) return new Map();
  const keyArgs = models.map((model) => keys.depth(prefix, model));
  const sums = (await redis.eval(
    EXCHANGE,
    keyArgs.length,
    ...keyArgs,
    gatewayId,
    staleMs,
    ...models.map((m) => mine.get(m) ?? 0),
  )) as number[];
  return new Map(models.map((model, i) => [model, Number(sums[i] ?? 0)]));
}

/** This gateway's side of the depth exchange: `exchangeDepths` with its connection, prefix, id and staleness bound. */
export class DepthExchange {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly gatewayId: string,
    /** A report older than this (on Redis's clock) is from a gateway that stopped. */
    private readonly staleMs: number,
  ) {}

  /** Reports this gateway's counts per model and answers with the other gateways' sum per model. */
  exchange(mine: Map<string, number>): Promise<Map<string, number>> {
    return exchangeDepths(this.redis, this.prefix, this.gatewayId, mine, this.staleMs);
  }
}
