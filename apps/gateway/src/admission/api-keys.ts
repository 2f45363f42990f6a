import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import fs from 'node:fs';
import { z } from 'zod';
import { BULK, PRIORITIES, type Priority } from '@tserve/contract';

/**
 * API keys: `tsk_<id>_<secret>`. Only a SHA-256 of the secret is stored: the secret is 32 random
 * bytes, so a fast hash is as safe as a slow one and keeps the check cheap. The id names the key in
 * logs and metrics; the secret is never written anywhere by the server.
 */

const keySchema = z
  .object({
    id: z.string().regex(/^[a-z0-9]{4,32}$/, 'lower-case letters and digits, 4 to 32'),
    name: z.string().min(1).max(64),
    /** `sha256:<hex>` of the secret. */
    hash: z.string().regex(/^sha256:[0-9a-f]{64}$/, 'sha256:<64 hex digits>'),
    /** Model ids this key may call; ["*"] for all. */
    models: z.array(z.string().min(1)).min(1).default(['*']),
    /** Requests allowed per window, shared by every gateway. */
    rate: z
      .object({ requests: z.number().int().min(1), per_seconds: z.number().int().min(1) })
      .strict()
      .optional(),
    /** Requests in flight at once, over all gateways. */
    concurrency: z.number().int().min(1).optional(),
    priority: z.enum(PRIORITIES).default('interactive'),
  })
  .strict();

const keyFileSchema = z.object({ keys: z.array(keySchema) }).strict();

export type ApiKey = z.infer<typeof keySchema>;

const PREFIX = 'tsk';

function hashSecret(secret: string): string {
  return `sha256:${createHash('sha256').update(secret).digest('hex')}`;
}

/** A new key: the token to hand to the client once, and the entry to store. */
export function createKey(options: Omit<ApiKey, 'id' | 'hash'>): { token: string; entry: ApiKey } {
  const id = randomBytes(6).toString('hex');
  const secret = randomBytes(32).toString('base64url');
  return { token: `${PREFIX}_${id}_${secret}`, entry: keySchema.parse({ ...options, id, hash: hashSecret(secret) }) };
}

/** Compared against when the id is unknown, so that a miss takes as long as a wrong secret. */
const DUMMY_HASH = Buffer.from(hashSecret('no such key'));

export function parseKeyFile(text: string, source: string): ApiKey[] {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new Error(`${source} is not valid JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
  const parsed = keyFileSchema.safeParse(raw);
  if (!parsed.success)
    throw new Error(`${source}: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  const ids = new Set<string>();
  for (const key of parsed.data.keys) {
    if (ids.has(key.id)) throw new Error(`${source}: key id ${key.id} appears twice`);
    ids.add(key.id);
  }
  return parsed.data.keys;
}

/**
 * The keys in force. Read from API_KEYS (JSON) or API_KEYS_FILE; the file is re-read when it
 * changes, so a key is added or revoked without a restart. A file that turns unreadable keeps the
 * keys already loaded (and says so), rather than locking every client out.
 */
export class KeyStore {
  private keys = new Map<string, ApiKey>();
  private watching?: string;

  constructor(
    keys: ApiKey[],
    private readonly onReload: (message: string, error?: boolean) => void = () => {},
  ) {
    this.replace(keys);
  }

  static fromFile(path: string, onReload?: (message: string, error?: boolean) => void): KeyStore {
    const store = new KeyStore(parseKeyFile(fs.readFileSync(path, 'utf8'), path), onReload);
    store.watch(path);
    return store;
  }

  get size(): number {
    return this.keys.size;
  }

  /** The key a token names, if its secret is right; the same work whatever is wrong with it. */
  verify(token: string | undefined): ApiKey | undefined {
    const match = /^tsk_([a-z0-9]{4,32})_([A-Za-z0-9_-]{1,128})$/.exec(token ?? '');
    const key = match ? this.keys.get(match[1]) : undefined;
    const expected = key ? Buffer.from(key.hash) : DUMMY_HASH;
    const given = Buffer.from(hashSecret(match?.[2] ?? ''));
    const equal = timingSafeEqual(expected, given);
    return key && equal ? key : undefined;
  }

  /** The key in force with this id (a batch's owner), whatever its secret. */
  byId(id: string): ApiKey | undefined {
    return this.keys.get(id);
  }

  stop(): void {
    if (this.watching) fs.unwatchFile(this.watching);
  }

  private replace(keys: ApiKey[]): void {
    this.keys = new Map(keys.map((k) => [k.id, k]));
  }

  private watch(path: string): void {
    this.watching = path;
    // Polling, not inotify: it also sees files replaced by a rename and files on network or
    // Kubernetes secret volumes (atomic symlink swaps).
    fs.watchFile(path, { interval: 1000, persistent: false }, (now, before) => {
      if (now.mtimeMs === before.mtimeMs && now.size === before.size) return;
      try {
        this.replace(parseKeyFile(fs.readFileSync(path, 'utf8'), path));
        this.onReload(`API keys reloaded from ${path}: ${this.keys.size} key(s)`);
      } catch (err) {
        this.onReload(
          `API keys not reloaded, keeping the ${this.keys.size} in force: ${err instanceof Error ? err.message : String(err)}`,
          true,
        );
      }
    });
  }
}

export function keyAllows(key: ApiKey, model: string): boolean {
  return key.models.includes('*') || key.models.includes(model);
}

/** The class a request runs in: its key's, or lower if the client asks for lower. */
export function effectivePriority(keyClass: Priority, asked: Priority | undefined): Priority {
  return keyClass === BULK || asked === BULK ? BULK : 'interactive';
}
