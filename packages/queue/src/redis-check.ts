import { Redis } from 'ioredis';
import { describeTarget, redisOptions, RedisSettingsError, throughSentinels, type RedisTarget } from './connection.js';

/** What one try to reach Redis found. */
export type RedisCheck =
  | { state: 'answers' }
  /** Nothing answers (yet): down, starting, or failing over. Worth waiting for. */
  | { state: 'unreachable'; reason: string }
  /** It answers, and refuses these settings: trying again will not help. */
  | { state: 'refused'; error: RedisSettingsError };

/** Redis's own refusals of a user or password (AUTH, HELLO), and of an ACL user's rights. */
const CREDENTIALS = /WRONGPASS|NOAUTH|invalid password|invalid username-password|NOPERM|user is disabled/i;
/** Node's TLS failures: a certificate that does not verify, or TLS spoken to a plain port. */
const TLS_FAILURE =
  /certificate|self[- ]signed|CERT_|ERR_TLS|ERR_SSL|SSL routines|wrong version number|packet length too long|handshake/i;
/** A sentinel's answer that it watches no primary of that name (Redis 7; ioredis' word for older ones). */
const UNKNOWN_MASTER = /No such master with that name|got an invalid reply: null/;

/** Why Redis refuses these settings, from what the connection said (`said`, in order); undefined if it does not. */
function refusal(target: RedisTarget, said: string[]): RedisSettingsError | undefined {
  const where = describeTarget(target);
  /** The first thing said that matches, as a clause: from Redis's own word on, without its full stop. */
  const first = (pattern: RegExp, from = /^/) => {
    const text = said.find((s) => pattern.test(s));
    return text?.slice(Math.max(0, text.search(from))).replace(/\.$/, '');
  };
  const credentials = first(CREDENTIALS, /WRONGPASS|NOAUTH|NOPERM/);
  if (credentials) {
    // ioredis' words for a sentinel's refusal: "failed to connect to sentinel <address> because WRONGPASS …".
    const bySentinel = said.some((s) => /sentinel .* because/.test(s) && CREDENTIALS.test(s));
    const sentinel = bySentinel ? ' (a sentinel: REDIS_SENTINEL_PASSWORD)' : '';
    return new RedisSettingsError(
      `Redis refuses the user or password${sentinel} at ${where}: ${credentials}. Check ${sentinel ? 'REDIS_SENTINEL_PASSWORD' : 'the user:password in REDIS_URL'}.`,
    );
  }
  const tls = first(TLS_FAILURE);
  if (tls)
    return new RedisSettingsError(
      `TLS to Redis failed at ${where}: ${tls}. A rediss:// REDIS_URL needs a server that speaks TLS on that port, and REDIS_TLS_CA naming the CA that signed its certificate where no public CA did.`,
    );
  if (said.some((s) => UNKNOWN_MASTER.test(s)))
    return new RedisSettingsError(
      `the sentinels of ${where} know no primary of that name: set REDIS_SENTINEL_MASTER to the name in their "sentinel monitor" line.`,
    );
  return undefined;
}

/**
 * One connection and one PING, no retries: does Redis answer these settings now, refuse them, or is
 * nothing there? A refusal names what to fix, so that a program with a wrong password or CA stops
 * at start with the reason instead of retrying forever in silence.
 */
export async function checkRedis(target: RedisTarget, timeoutMs = 1500): Promise<RedisCheck> {
  let options;
  try {
    options = redisOptions(target);
  } catch (err) {
    if (err instanceof RedisSettingsError) return { state: 'refused', error: err };
    throw err;
  }
  const client = new Redis({
    ...options,
    lazyConnect: true,
    connectTimeout: timeoutMs,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    sentinelRetryStrategy: () => null,
    failoverDetector: false,
    enableOfflineQueue: false,
  });
  // A sentinel's answer (an unknown primary, a refused password) comes as this event, then the
  // connection fails with only "All sentinels are unreachable".
  const said: string[] = [];
  client.on('error', (err: Error) => said.push(err.message));
  client.on('sentinelError', (err: Error) => said.push(err.message));
  const timer = setTimeout(() => client.disconnect(), timeoutMs + (throughSentinels(target) ? timeoutMs : 0));
  try {
    await client.connect();
    // A server that requires a password refuses the first command where no AUTH was sent.
    await client.ping();
    return { state: 'answers' };
  } catch (err) {
    said.push(err instanceof Error ? err.message : String(err));
    const refused = refusal(target, said);
    return refused ? { state: 'refused', error: refused } : { state: 'unreachable', reason: said.join('; ') };
  } finally {
    clearTimeout(timer);
    client.disconnect();
  }
}

/**
 * Resolves where Redis answers these settings, or nothing answers yet (a program waits for it);
 * throws RedisSettingsError, naming what to fix, where it refuses them.
 */
export async function assertRedisAccepts(target: RedisTarget, timeoutMs?: number): Promise<void> {
  const check = await checkRedis(target, timeoutMs);
  if (check.state === 'refused') throw check.error;
}

/** One PING with no retries: does anything answer these settings right now? */
export async function redisAnswers(target: RedisTarget, timeoutMs = 1500): Promise<boolean> {
  return (await checkRedis(target, timeoutMs)).state === 'answers';
}
