import { randomBytes } from 'node:crypto';
import type { ChainableCommander, Redis } from 'ioredis';
import { z } from 'zod';
import { ApiError } from '@tserve/contract';

/**
 * The files of OpenAI's Batch API (`/v1/files`), kept in Redis: a record (hash) and its lines (a
 * list), so that any gateway reads any file and a batch's lines are read a window at a time. Each
 * file belongs to the API key that made it (its owner); another key never sees it. The bytes of
 * every file and of the results not yet made into files are counted in one place, against
 * FILES_STORE_MAX_MB. Files go when they are deleted, or expire (each runner's turn forgets those due).
 */

/** OpenAI's file object, as its clients read it. */
export const fileObjectSchema = z.strictObject({
  id: z.string(),
  object: z.literal('file'),
  bytes: z.number().int(),
  created_at: z.number().int(),
  expires_at: z.number().int().meta({ description: 'when the file goes (FILES_TTL_S after it was made)' }),
  filename: z.string(),
  purpose: z.enum(['batch', 'batch_output']),
  status: z.literal('processed'),
});
export type FileObject = z.infer<typeof fileObjectSchema>;
export type FilePurpose = FileObject['purpose'];

export interface FileLimits {
  maxBytes: number;
  maxLines: number;
  storeMaxBytes: number;
  ttlS: number;
}

/** Lines are written to Redis this many at a time as an upload arrives, and read back likewise. */
const LINES_PER_WRITE = 500;

/** Where the Batch API's data lives, under QUEUE_PREFIX. */
export class OfflineKeys {
  constructor(private readonly prefix: string) {}
  file = (id: string) => `${this.prefix}:offline:file:${id}`;
  lines = (id: string) => `${this.prefix}:offline:file-lines:${id}`;
  filesOf = (owner: string) => `${this.prefix}:offline:files-of:${owner}`;
  batch = (id: string) => `${this.prefix}:offline:batch:${id}`;
  results = (id: string) => `${this.prefix}:offline:batch-results:${id}`;
  lease = (id: string) => `${this.prefix}:offline:batch-lease:${id}`;
  batchesOf = (owner: string) => `${this.prefix}:offline:batches-of:${owner}`;
  /** Set: the batches not yet ended, which some gateway must run. */
  active = () => `${this.prefix}:offline:active`;
  /** Sorted set of `file:<id>` and `batch:<id>`, scored by when each expires (ms). */
  expiring = () => `${this.prefix}:offline:expiring`;
  /** Hash: model → lines of its batches not yet answered, for GET /backlog. */
  backlog = () => `${this.prefix}:offline:backlog`;
  /** Bytes held: files, and results not yet made into files. */
  bytes = () => `${this.prefix}:offline:bytes`;
}

/**
 * Deletes a file's or a batch's record and what goes with it. KEYS: the record, the store's byte
 * count, the owner's index, the expiring set, then the other keys to delete; ARGV: the bytes it
 * held, its id in the owner's index, its member in the expiring set. Only the call that deleted
 * the record lowers the count: two gateways may expire the same one, or a delete meet an expiry.
 */
const FORGET = `
local deleted = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[4], ARGV[3])
if deleted == 0 then return 0 end
redis.call('DECRBY', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[2])
for i = 5, #KEYS do redis.call('DEL', KEYS[i]) end
return 1
`;

/** Forgets a file (`kind` file) or a batch, once (see FORGET); false if another call did. */
export async function forget(
  redis: Redis,
  keys: OfflineKeys,
  kind: 'file' | 'batch',
  { id, owner, bytes, more }: { id: string; owner: string; bytes: number; more: string[] },
): Promise<boolean> {
  const [record, index] =
    kind === 'file' ? [keys.file(id), keys.filesOf(owner)] : [keys.batch(id), keys.batchesOf(owner)];
  const deleted = await redis.eval(
    FORGET,
    4 + more.length,
    record,
    keys.bytes(),
    index,
    keys.expiring(),
    ...more,
    bytes,
    id,
    `${kind}:${id}`,
  );
  return deleted === 1;
}

export function newId(kind: 'file' | 'batch'): string {
  return `${kind}-${randomBytes(12).toString('hex')}`;
}

/** One page of a listing, as OpenAI's cursor pages read it. */
export interface Page<T> {
  data: T[];
  has_more: boolean;
}

/** A page of `ids` (newest first unless `ascending`), after the id `after`, of at most `limit`. */
export async function pageOf(
  redis: Redis,
  zset: string,
  { after, limit, ascending }: { after?: string; limit: number; ascending?: boolean },
): Promise<{ ids: string[]; more: boolean }> {
  let start = 0;
  if (after !== undefined) {
    const rank = ascending ? await redis.zrank(zset, after) : await redis.zrevrank(zset, after);
    if (rank === null) return { ids: [], more: false };
    start = rank + 1;
  }
  const ids = ascending
    ? await redis.zrange(zset, start, start + limit)
    : await redis.zrevrange(zset, start, start + limit);
  return { ids: ids.slice(0, limit), more: ids.length > limit };
}

const tooLarge = (message: string) => new ApiError('payload_too_large', message);

export class FileStore {
  constructor(
    private readonly redis: Redis,
    readonly keys: OfflineKeys,
    readonly limits: FileLimits,
  ) {}

  /** Refuses (507) when the store holds its bound already: checked before an upload and a batch. */
  async checkRoom(adding = 0): Promise<void> {
    const held = Number((await this.redis.get(this.keys.bytes())) ?? 0);
    if (held + adding > this.limits.storeMaxBytes)
      throw new ApiError(
        'insufficient_storage',
        `the files store is full (FILES_STORE_MAX_MB = ${this.limits.storeMaxBytes / 1e6}); delete files or wait for them to expire`,
      );
  }

  /**
   * A file from its lines as they arrive, written a window at a time; blank lines are left out.
   * Refused (413) past FILES_MAX_MB or FILES_MAX_LINES, and (507) when the store fills; nothing of
   * a refused or broken upload stays.
   */
  async create(
    owner: string,
    filename: string,
    purpose: FilePurpose,
    lines: AsyncIterable<string>,
  ): Promise<FileObject> {
    const id = newId('file');
    const key = this.keys.lines(id);
    let bytes = 0;
    let count = 0;
    let pending: string[] = [];
    const flush = async () => {
      if (pending.length === 0) return;
      const written = pending;
      pending = [];
      await this.redis.rpush(key, ...written);
    };
    try {
      await this.checkRoom();
      for await (const line of lines) {
        bytes += Buffer.byteLength(line) + 1;
        if (bytes > this.limits.maxBytes)
          throw tooLarge(`the file is larger than ${this.limits.maxBytes / 1e6} MB (FILES_MAX_MB)`);
        if (line.trim() === '') continue;
        if (++count > this.limits.maxLines)
          throw tooLarge(`the file has more than ${this.limits.maxLines} lines (FILES_MAX_LINES)`);
        pending.push(line);
        if (pending.length >= LINES_PER_WRITE) {
          await flush();
          await this.checkRoom(bytes);
        }
      }
      await flush();
      await this.checkRoom(bytes);
    } catch (err) {
      await this.redis.del(key).catch(() => undefined);
      throw err;
    }
    const multi = this.redis.multi();
    const file = this.record(multi, owner, { id, filename, purpose, bytes, lines: count });
    await multi.exec();
    return file;
  }

  /**
   * Records a file whose lines are in the list of `id` already, as one of the commands of `multi`
   * (a batch's output files are recorded in the same step that ends the batch).
   */
  record(
    multi: ChainableCommander,
    owner: string,
    {
      id,
      filename,
      purpose,
      bytes,
      lines,
    }: { id: string; filename: string; purpose: FilePurpose; bytes: number; lines: number },
  ): FileObject {
    const now = Date.now();
    const file: FileObject = {
      id,
      object: 'file',
      bytes,
      created_at: Math.floor(now / 1000),
      expires_at: Math.floor(now / 1000) + this.limits.ttlS,
      filename,
      purpose,
      status: 'processed',
    };
    multi
      .hset(this.keys.file(id), { owner, lines, json: JSON.stringify(file) })
      .zadd(this.keys.filesOf(owner), now, id)
      .zadd(this.keys.expiring(), now + this.limits.ttlS * 1000, `file:${id}`)
      .incrby(this.keys.bytes(), bytes);
    return file;
  }

  /** The file, if it exists and `owner` made it, and how many lines it holds. */
  async get(owner: string, id: string): Promise<{ file: FileObject; lines: number } | undefined> {
    const [held, json, lines] = await this.redis.hmget(this.keys.file(id), 'owner', 'json', 'lines');
    if (held !== owner || !json) return undefined;
    return { file: JSON.parse(json) as FileObject, lines: Number(lines) };
  }

  async list(
    owner: string,
    query: { after?: string; limit: number; ascending: boolean; purpose?: string },
  ): Promise<Page<FileObject>> {
    const { ids, more } = await pageOf(this.redis, this.keys.filesOf(owner), query);
    const files = await Promise.all(ids.map(async (id) => (await this.get(owner, id))?.file));
    const data = files
      .filter((f): f is FileObject => f !== undefined)
      .filter((f) => query.purpose === undefined || f.purpose === query.purpose);
    return { data, has_more: more };
  }

  /** Lines `start` to `start + count - 1` of a file (fewer past its end). */
  readLines(id: string, start: number, count: number): Promise<string[]> {
    return this.redis.lrange(this.keys.lines(id), start, start + count - 1);
  }

  /** The file's lines, a window at a time, for its content. */
  async *content(id: string): AsyncGenerator<string[]> {
    for (let start = 0; ; start += LINES_PER_WRITE) {
      const lines = await this.readLines(id, start, LINES_PER_WRITE);
      if (lines.length === 0) return;
      yield lines;
    }
  }

  /** Deletes the file if `owner` made it; false if there was none to delete. */
  async delete(owner: string, id: string): Promise<boolean> {
    const stored = await this.get(owner, id);
    return stored !== undefined && this.forget(owner, id, stored.file.bytes);
  }

  private forget(owner: string, id: string, bytes: number): Promise<boolean> {
    return forget(this.redis, this.keys, 'file', { id, owner, bytes, more: [this.keys.lines(id)] });
  }

  /** Forgets a file whose time is up (the runner's turn, once it is due). */
  async expire(id: string): Promise<void> {
    const [owner, json] = await this.redis.hmget(this.keys.file(id), 'owner', 'json');
    const bytes = json === null ? 0 : (JSON.parse(json) as FileObject).bytes;
    await this.forget(owner ?? '', id, bytes);
  }
}
