import type { ChainableCommander, Redis } from 'ioredis';
import { forget, newId, pageOf, type OfflineKeys, type Page } from './files.js';
import { ENDED, nowS, type BatchObject, type HeldBatch } from './batch-object.js';

/**
 * OpenAI's batch objects, kept in Redis beside their files. A batch's record is a hash: the object
 * as its runner last wrote it (`json`), its owner, the counts of lines answered (`completed`,
 * `failed`) that each answer moves as it is stored, and `cancelling_at`, which a cancel sets
 * without taking the record from its runner. Each line's answer is a field of the batch's results
 * hash, stored once: a line answered twice (by a runner that lost its lease, or after a restart)
 * keeps its first answer and moves no count.
 */

/**
 * Stores lines' answers, each once. KEYS: results, the batch, the store's byte count, the backlog;
 * ARGV: the batch's model ('' for none), then each line's index and its answer, marked `o` (output
 * file) or `e` (error file). A line that has an answer keeps it, and moves no count. Returns how
 * many were stored.
 */
const STORE_ANSWERS = `
local counts = { o = 0, e = 0 }
local bytes = 0
for i = 2, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
    local kind = string.sub(ARGV[i + 1], 1, 1)
    counts[kind] = counts[kind] + 1
    bytes = bytes + #ARGV[i + 1]
  end
end
if counts.o > 0 then redis.call('HINCRBY', KEYS[2], 'completed', counts.o) end
if counts.e > 0 then redis.call('HINCRBY', KEYS[2], 'failed', counts.e) end
redis.call('HINCRBY', KEYS[2], 'result_bytes', bytes)
redis.call('INCRBY', KEYS[3], bytes)
if ARGV[1] ~= '' then redis.call('HINCRBY', KEYS[4], ARGV[1], -(counts.o + counts.e)) end
return counts.o + counts.e
`;

const FINISH_FIELDS = ['out_lines', 'out_bytes', 'err_lines', 'err_bytes'];

export interface FileSize {
  lines: number;
  bytes: number;
}

/**
 * Moves answers into the files' lists (BatchStore.move). KEYS: results, the batch, the output and
 * error lists, the store's byte count; ARGV: the first line, how many, and for an expired batch the
 * text of its error line before and after a line's index ('' otherwise). Each file line is counted
 * with its newline; each answer held its line and its one-byte mark, which is what leaves the
 * store's count until the files are recorded.
 */
const MOVE_ANSWERS = `
local start, count, head, tail = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local out, err = {}, {}
local outBytes, errBytes, held = 0, 0, 0
for i = start, start + count - 1 do
  local answer = redis.call('HGET', KEYS[1], i)
  if answer then
    local line = string.sub(answer, 2)
    held = held + #answer
    if string.sub(answer, 1, 1) == 'o' then
      out[#out + 1] = line
      outBytes = outBytes + #line + 1
    else
      err[#err + 1] = line
      errBytes = errBytes + #line + 1
    end
    redis.call('HDEL', KEYS[1], i)
  elseif head ~= '' then
    local line = head .. i .. tail
    err[#err + 1] = line
    errBytes = errBytes + #line + 1
  end
end
if #out > 0 then redis.call('RPUSH', KEYS[3], unpack(out)) end
if #err > 0 then redis.call('RPUSH', KEYS[4], unpack(err)) end
redis.call('HSET', KEYS[2], 'fin_upto', start + count)
redis.call('HINCRBY', KEYS[2], 'out_lines', #out)
redis.call('HINCRBY', KEYS[2], 'out_bytes', outBytes)
redis.call('HINCRBY', KEYS[2], 'err_lines', #err)
redis.call('HINCRBY', KEYS[2], 'err_bytes', errBytes)
redis.call('HINCRBY', KEYS[2], 'result_bytes', -held)
redis.call('DECRBY', KEYS[5], held)
return 1
`;

/** KEYS: results; ARGV: the first line, how many. 1 for each line with an answer, else 0. */
const ANSWERED = `
local flags = {}
local start = tonumber(ARGV[1])
for i = start, start + tonumber(ARGV[2]) - 1 do flags[#flags + 1] = redis.call('HEXISTS', KEYS[1], i) end
return flags
`;

const [MARK_OK, MARK_ERROR] = [Buffer.from('o'), Buffer.from('e')];

/** A line's answer: for the output file (a 2xx) or the error file. */
export interface LineAnswer {
  index: number;
  line: string | Buffer;
  ok: boolean;
}

export class BatchStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: OfflineKeys,
    private readonly ttlS: number,
  ) {}

  async create(
    owner: string,
    fields: Pick<BatchObject, 'endpoint' | 'input_file_id' | 'completion_window' | 'metadata' | 'expires_at'> & {
      total: number;
    },
  ): Promise<BatchObject> {
    const { total, ...given } = fields;
    const batch: BatchObject = {
      id: newId('batch'),
      object: 'batch',
      errors: null,
      status: 'validating',
      output_file_id: null,
      error_file_id: null,
      created_at: nowS(),
      in_progress_at: null,
      finalizing_at: null,
      completed_at: null,
      failed_at: null,
      expired_at: null,
      cancelling_at: null,
      cancelled_at: null,
      request_counts: { total, completed: 0, failed: 0 },
      model: null,
      ...given,
    };
    await this.redis
      .multi()
      .hset(this.keys.batch(batch.id), { owner, json: JSON.stringify(batch), completed: 0, failed: 0 })
      .zadd(this.keys.batchesOf(owner), Date.now(), batch.id)
      .sadd(this.keys.active(), batch.id)
      .exec();
    return batch;
  }

  /** The batch with its counts as they stand, whoever asks (the runner). */
  async held(id: string): Promise<HeldBatch | undefined> {
    const [owner, json, completed, failed, cancellingAt] = await this.redis.hmget(
      this.keys.batch(id),
      'owner',
      'json',
      'completed',
      'failed',
      'cancelling_at',
    );
    if (owner === null || json === null) return undefined;
    const batch = JSON.parse(json) as BatchObject;
    batch.request_counts = { ...batch.request_counts, completed: Number(completed), failed: Number(failed) };
    if (cancellingAt !== null && !ENDED.includes(batch.status)) {
      batch.status = 'cancelling';
      batch.cancelling_at = Number(cancellingAt);
    }
    return { owner, batch };
  }

  /** The batch, if `owner` made it. */
  async get(owner: string, id: string): Promise<BatchObject | undefined> {
    const held = await this.held(id);
    return held?.owner === owner ? held.batch : undefined;
  }

  async list(owner: string, query: { after?: string; limit: number }): Promise<Page<BatchObject>> {
    const { ids, more } = await pageOf(this.redis, this.keys.batchesOf(owner), query);
    const batches = await Promise.all(ids.map((id) => this.get(owner, id)));
    return { data: batches.filter((b): b is BatchObject => b !== undefined), has_more: more };
  }

  /** Asks the batch's runner to stop it; the batch as it then stands, or undefined if `owner` has none. */
  async cancel(owner: string, id: string): Promise<BatchObject | undefined> {
    const batch = await this.get(owner, id);
    // As OpenAI's: a batch is cancelled while it validates or runs, not once it is making its files.
    if (!batch || (batch.status !== 'validating' && batch.status !== 'in_progress')) return batch;
    await this.redis.hsetnx(this.keys.batch(id), 'cancelling_at', nowS());
    return this.get(owner, id);
  }

  /** The runner's write of the batch's object (its counts and cancel stay where they are kept). */
  async write(batch: BatchObject): Promise<void> {
    await this.redis.hset(this.keys.batch(batch.id), 'json', JSON.stringify(batch));
  }

  /**
   * An ended batch, with its last counts, leaves the active set and takes its `unanswered` lines
   * (cancelled or expired) out of the backlog; it goes when its files do.
   */
  end(multi: ChainableCommander, batch: BatchObject, unanswered: number): void {
    const { completed, failed } = batch.request_counts;
    multi
      .hset(this.keys.batch(batch.id), { json: JSON.stringify(batch), completed, failed })
      .srem(this.keys.active(), batch.id)
      .zadd(this.keys.expiring(), Date.now() + this.ttlS * 1000, `batch:${batch.id}`);
    if (batch.model && unanswered > 0) multi.hincrby(this.keys.backlog(), batch.model, -unanswered);
  }

  /** How far a batch's answers have been made into its files (finishBatch), should it start again. */
  async finished(id: string): Promise<{ upto: number; output: FileSize; errors: FileSize }> {
    const fields = await this.redis.hmget(this.keys.batch(id), 'fin_upto', ...FINISH_FIELDS);
    const [upto, outLines, outBytes, errLines, errBytes] = fields.map((v) => Number(v ?? 0));
    return { upto, output: { lines: outLines, bytes: outBytes }, errors: { lines: errLines, bytes: errBytes } };
  }

  /**
   * Moves lines `start`… of the answers to the ends of the output and error files' lists, inside
   * Redis, in one step with the record of how far the move has come: the answers are held once, in
   * the hash or in the lists, and a move cut short by a death starts again where it stopped. With
   * `expired`, a line without an answer gets the error line `batch_expired`.
   */
  async move(
    id: string,
    start: number,
    count: number,
    to: { output: string; errors: string },
    /** An expired batch's error line for a line it left unrun, around the line's index (expiredLine). */
    expired: { head: string; tail: string } | undefined,
  ): Promise<void> {
    await this.redis.eval(
      MOVE_ANSWERS,
      5,
      this.keys.results(id),
      this.keys.batch(id),
      this.keys.lines(to.output),
      this.keys.lines(to.errors),
      this.keys.bytes(),
      start,
      count,
      expired?.head ?? '',
      expired?.tail ?? '',
    );
  }

  multi(): ChainableCommander {
    return this.redis.multi();
  }

  /** Stores each line's answer unless it has one; how many were stored. */
  async answer(batch: BatchObject, answers: LineAnswer[]): Promise<number> {
    if (answers.length === 0) return 0;
    const args = answers.flatMap(({ index, line, ok }) => [
      index,
      Buffer.concat([ok ? MARK_OK : MARK_ERROR, typeof line === 'string' ? Buffer.from(line) : line]),
    ]);
    const stored = await this.redis.eval(
      STORE_ANSWERS,
      4,
      this.keys.results(batch.id),
      this.keys.batch(batch.id),
      this.keys.bytes(),
      this.keys.backlog(),
      batch.model ?? '',
      ...args,
    );
    return Number(stored);
  }

  /**
   * The batch starts: its lines count in its model's backlog until each is answered. In one step
   * with the status, so that a runner that dies between the two cannot count them twice.
   */
  async start(batch: BatchObject): Promise<void> {
    const multi = this.redis.multi().hset(this.keys.batch(batch.id), 'json', JSON.stringify(batch));
    if (batch.model) multi.hincrby(this.keys.backlog(), batch.model, batch.request_counts.total);
    await multi.exec();
  }

  /** A model's lines of running batches not yet answered (GET /backlog). */
  backlog = async (model: string): Promise<number> =>
    Math.max(0, Number((await this.redis.hget(this.keys.backlog(), model)) ?? 0));

  /** Which of lines `start`… have an answer stored, asked inside Redis: the answers stay there. */
  async answered(id: string, start: number, count: number): Promise<boolean[]> {
    if (count <= 0) return [];
    const flags = (await this.redis.eval(ANSWERED, 1, this.keys.results(id), start, count)) as number[];
    return flags.map((flag) => flag === 1);
  }

  /** Forgets a batch whose time is up (the runner's turn, once it is due). */
  async expire(id: string): Promise<void> {
    const [owner, bytes] = await this.redis.hmget(this.keys.batch(id), 'owner', 'result_bytes');
    const more = [this.keys.results(id), this.keys.lease(id)];
    await forget(this.redis, this.keys, 'batch', { id, owner: owner ?? '', bytes: Number(bytes ?? 0), more });
    await this.redis.srem(this.keys.active(), id);
  }
}
