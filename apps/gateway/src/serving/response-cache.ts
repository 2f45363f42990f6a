import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import {
  answeredFromJson,
  type Operation,
  type ReadRequestOutcome,
  type RequestTiming,
  type TaskInput,
  type TaskParameters,
} from '@tserve/contract';

/** What one request's inputs are cached under, besides each input: who computes them, and how. */
export interface CacheScope {
  model: string;
  /** sha256 of the weights file every live worker of the model loaded: new weights never find old answers. */
  sha256: string;
  task: Operation;
  /** As validated, defaults filled in: two spellings of the same call find the same entries. */
  parameters: TaskParameters;
}

/** What the cache held of a request's inputs (ResponseCache.lookup). */
export interface CacheLookup {
  /** Each input's entry key. */
  keys: string[];
  held: Array<{ json: Buffer; tokens: number } | undefined>;
  /** The places of the inputs the cache lacks, in order. */
  missing: number[];
}

/** A request's answer with what the cache held of it. */
export interface CachedAnswer {
  outcome: ReadRequestOutcome;
  /** Inputs answered from the cache. */
  hits: number;
}

/** Per model: inputs answered from the cache, and inputs looked up there in vain (then computed). */
export interface CacheCounts {
  hits: number;
  misses: number;
}

/**
 * Bytes an entry is counted at besides its key (in the keyspace, and again in the index's member)
 * and its value: what Redis spends on a key, its expiry and a sorted-set member. Counted high rather
 * than low, so that the bound holds in Redis's own measure (MEMORY USAGE, which the test checks and
 * which leaves out the expiry table and the allocator's slack).
 */
const ENTRY_OVERHEAD_BYTES = 256;

/**
 * Stores entries and evicts past the bound in one step, atomically, so that concurrent gateways
 * never leave the count behind what Redis holds. KEYS: the index (sorted set of `<bytes> <key>`
 * members scored by when they were stored, Redis's clock), the byte count, then each entry's key;
 * ARGV: TTL (ms), bound (bytes), then each entry's value and counted bytes. An entry already there
 * stays (first answer wins). Entries past their TTL leave the index first, then the oldest until the
 * count is within the bound. Returns the count.
 */
const STORE_SCRIPT = `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[1])
local bound = tonumber(ARGV[2])
local total = tonumber(redis.call('GET', KEYS[2]) or '0')
local function forget(member)
  local bytes, key = string.match(member, '^(%d+) (.*)$')
  redis.call('DEL', key)
  total = total - tonumber(bytes)
end
for _ = 1, 1000 do
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #oldest == 0 or tonumber(oldest[2]) > now - ttl then break end
  redis.call('ZREM', KEYS[1], oldest[1])
  forget(oldest[1])
end
for i = 3, #KEYS do
  local value = ARGV[2 * i - 3]
  local bytes = ARGV[2 * i - 2]
  if redis.call('SET', KEYS[i], value, 'PX', ttl, 'NX') then
    if redis.call('ZADD', KEYS[1], now, bytes .. ' ' .. KEYS[i]) == 1 then total = total + tonumber(bytes) end
  end
end
while total > bound do
  local popped = redis.call('ZPOPMIN', KEYS[1])
  if #popped == 0 then
    total = 0
    break
  end
  forget(popped[1])
end
if total < 0 then total = 0 end
redis.call('SET', KEYS[2], total)
return total
`;

const NO_TIME: RequestTiming = { queue_ms: 0, inference_ms: 0, batch_size: 0 };

/** JSON with object keys sorted, so that equal values give equal text whatever order their keys came in. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v !== null && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(
          Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
        )
      : v,
  );
}

/** An entry's value: the tokens the model read for the input, a newline, then the output's JSON (which holds no newline byte). */
function encodeEntry(json: Buffer, tokens: number): Buffer {
  return Buffer.concat([Buffer.from(`${tokens}\n`), json]);
}

function decodeEntry(value: Buffer): { json: Buffer; tokens: number } {
  const end = value.indexOf(10);
  return { tokens: Number(value.toString('latin1', 0, end)), json: value.subarray(end + 1) };
}

/**
 * Renames the inputs a sub-request's message names (`inputs[i]`, or `input` alone) to their places
 * in the client's request, of `count` inputs.
 */
function renameInputs(message: string, places: number[], count: number): string {
  const indexed = /^inputs\[(\d+)\]/.exec(message);
  if (indexed) return `inputs[${places[Number(indexed[1])]}]${message.slice(indexed[0].length)}`;
  if (places.length !== 1 || count === 1) return message;
  return message.startsWith('input ')
    ? `inputs[${places[0]}]${message.slice('input'.length)}`
    : `inputs[${places[0]}]: ${message}`;
}

/** The store script, as ioredis defines it on the connection: sent once, then run by its sha1. */
interface StoreCommand {
  tserveResponseCacheStore(numberOfKeys: number, ...args: Array<string | Buffer | number>): Promise<number>;
}

export interface ResponseCacheParts {
  /** Its own connection, or the queues' (RESPONSE_CACHE_REDIS_URL unset). */
  redis: Redis;
  /** The prefix of its keys, beside the queues' (keys.responseCache). */
  prefix: string;
  /** RESPONSE_CACHE_TTL_S. */
  ttlSeconds: number;
  /** RESPONSE_CACHE_MAX_MB. */
  maxMb: number;
  /** Told of a Redis failure; the request is computed afresh. */
  onError: (err: unknown) => void;
}

/**
 * The response cache every gateway shares: one entry per input, in Redis under a prefix of its own,
 * bounded by its own count of bytes (STORE_SCRIPT) rather than Redis's maxmemory-policy, which is
 * global and would evict queue data with it. A request is answered from it in part: only the inputs
 * it does not hold are sent to the workers, and their answers are stored for the next request.
 */
export class ResponseCache {
  readonly counts = new Map<string, CacheCounts>();
  /** Bytes the cache held, as counted at this gateway's last store. */
  bytes = 0;
  /** Bytes this gateway stored. */
  storedBytes = 0;
  private readonly ttlMs: number;
  private readonly maxBytes: number;
  private readonly redis: Redis & StoreCommand;

  constructor(private readonly parts: ResponseCacheParts) {
    this.ttlMs = parts.ttlSeconds * 1000;
    this.maxBytes = Math.floor(parts.maxMb * 2 ** 20);
    parts.redis.defineCommand('tserveResponseCacheStore', { lua: STORE_SCRIPT });
    this.redis = parts.redis as Redis & StoreCommand;
  }

  /** The index of entries by age (a sorted set), and their counted bytes: for tests and operators. */
  get indexKey(): string {
    return `${this.parts.prefix}:index`;
  }

  get bytesKey(): string {
    return `${this.parts.prefix}:bytes`;
  }

  /**
   * What the cache holds of a request's inputs: `missing` are the places of the inputs it lacks,
   * which the caller computes and hands to `complete`. A Redis error makes every input a miss: the
   * cache never fails a request.
   */
  async lookup(scope: CacheScope, inputs: TaskInput[]): Promise<CacheLookup> {
    const head = canonical([scope.model, scope.sha256, scope.task, scope.parameters]);
    const keys = inputs.map(
      (input) =>
        `${this.parts.prefix}:entry:${createHash('sha256').update(head).update('\n').update(canonical(input)).digest('base64url')}`,
    );
    const found = await this.redis.mgetBuffer(...keys).catch((err: unknown) => {
      this.parts.onError(err);
      return keys.map(() => null);
    });
    const missing = found.flatMap((value, i) => (value ? [] : [i]));
    const counts = this.counts.get(scope.model) ?? { hits: 0, misses: 0 };
    this.counts.set(scope.model, counts);
    counts.hits += inputs.length - missing.length;
    counts.misses += missing.length;
    return { keys, held: found.map((value) => (value ? decodeEntry(value) : undefined)), missing };
  }

  /**
   * The request's outcome, from what `lookup` found and, where it missed, what was computed for
   * the missing inputs; those answers are stored (none is, where Redis fails).
   */
  async complete(looked: CacheLookup, computed?: ReadRequestOutcome): Promise<CachedAnswer> {
    const { keys, held, missing } = looked;
    if (!computed) {
      const hits = held as Array<{ json: Buffer; tokens: number }>;
      const outcome = answeredFromJson(
        hits.map((e) => e.json),
        { id: '', ok: true, warnings: [], timing: NO_TIME, tokens: hits.map((e) => e.tokens) },
      );
      return { outcome, hits: keys.length };
    }
    const whole = missing.length === keys.length;
    if (!computed.ok) {
      if (whole) return { outcome: computed, hits: 0 };
      const error = { ...computed.error, error: renameInputs(computed.error.error, missing, keys.length) };
      return { outcome: { ...computed, error }, hits: keys.length - missing.length };
    }
    // A recorded outcome's outputs are at hand as JSON; a published one's are written here once, for Redis and the client both.
    const json = computed.outputsJson ?? computed.outputs.map((o) => Buffer.from(JSON.stringify(o)));
    const tokens = computed.tokens ?? [];
    // An outcome with warnings (an input truncated) is not stored: a hit would not carry them.
    if (!computed.warnings.length) {
      await this.store(
        missing.map((i) => keys[i]),
        json.map((output, j) => encodeEntry(output, tokens[j] ?? 0)),
      );
    }
    // Written once: the Hugging Face routes send these bytes as they are.
    if (whole) return { outcome: computed.outputsJson ? computed : { ...computed, outputsJson: json }, hits: 0 };
    const merged = held.map((e) => e ?? { json: Buffer.alloc(0), tokens: 0 });
    missing.forEach((place, j) => (merged[place] = { json: json[j], tokens: tokens[j] ?? 0 }));
    const outcome = answeredFromJson(
      merged.map((e) => e.json),
      {
        id: computed.id,
        ok: true,
        warnings: computed.warnings.map((w) => renameInputs(w, missing, keys.length)),
        timing: computed.timing,
        tokens: merged.map((e) => e.tokens),
      },
    );
    return { outcome, hits: keys.length - missing.length };
  }

  private async store(keys: string[], values: Buffer[]): Promise<void> {
    const args: Array<Buffer | number> = [this.ttlMs, this.maxBytes];
    let bytes = 0;
    values.forEach((value, i) => {
      const counted = 2 * keys[i].length + value.length + ENTRY_OVERHEAD_BYTES;
      bytes += counted;
      args.push(value, counted);
    });
    try {
      this.bytes = Number(
        await this.redis.tserveResponseCacheStore(2 + keys.length, this.indexKey, this.bytesKey, ...keys, ...args),
      );
      this.storedBytes += bytes;
    } catch (err) {
      this.parts.onError(err);
    }
  }
}
