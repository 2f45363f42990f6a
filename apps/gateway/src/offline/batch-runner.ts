import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { FileStore } from './files.js';
import type { BatchStore, LineAnswer } from './batches.js';
import { AnswerBuffer, linesInFlight, Slots } from './in-flight.js';
import { ENDED, nowS, type BatchObject } from './batch-object.js';
import { finishBatch, type Ending } from './batch-finish.js';
import { answerKind, answerLine, errorLine, isRefusal, lineId, parseLine } from './batch-lines.js';
import { LineClient } from './line-client.js';
import { BULK } from '@tserve/contract';

/**
 * Runs the batches that are not yet ended, on whichever gateways are up: each gateway claims a
 * batch by a lease in Redis that it renews while it runs it, so a batch has one runner at a time,
 * and one whose gateway died is taken up by another (or by the same, restarted) once its lease
 * lapses. A runner sends the lines that have no answer stored yet, a window at a time, to this
 * gateway's own routes in the bulk class, as many at once as fill the model's workers
 * (`linesInFlight`), and stores each answer once; lines shed, over quota or timed out go again,
 * behind interactive traffic, until the batch expires.
 */
/** Batches one gateway runs at once; the others wait their turn, or another gateway's. */
const BATCHES_AT_ONCE = 2;
/** Lines read from the input file, and their stored answers, at a time. */
const WINDOW = 256;
/** How often a running batch looks for a cancel or its end. */
const STOP_CHECK_MS = 250;

export interface RunnerParts {
  redis: Redis;
  files: FileStore;
  batches: BatchStore;
  gatewayId: string;
  /** A runner that has not renewed its lease for this long is taken to be gone. */
  leaseMs: number;
  /** The model registry: how many sequences the model calls of a model's workers hold. */
  models: { callSequences(model: string): number };
  /** The most bulk requests a model's queue takes (BATCH_QUEUE_SHARE of MAX_QUEUE_DEPTH). */
  bulkDepth: number;
  /** The headers that send a line as the key that owns its batch. */
  headersFor: (owner: string) => Record<string, string>;
  logger: Logger;
}

/** Renews the lease if this gateway holds it. KEYS: the lease; ARGV: the holder, its length (ms). */
const RENEW = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`;
/** Lets the lease go if this gateway holds it. */
const RELEASE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
`;

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });

/** How a batch whose runner has stopped sending ends, if it ends now: undefined while lines wait. */
function endingOf(batch: BatchObject): Ending | undefined {
  const { total, completed, failed } = batch.request_counts;
  if (batch.status === 'cancelling') return 'cancelled';
  if (completed + failed >= total) return 'completed';
  return nowS() >= batch.expires_at ? 'expired' : undefined;
}

export class BatchRunner {
  private client?: LineClient;
  private readonly running = new Map<string, { stop: AbortController; done: Promise<void> }>();
  private timer?: NodeJS.Timeout;
  private ticking = false;
  /** A kick came while a turn was under way: another turn follows it. */
  private kicked = false;

  constructor(private readonly parts: RunnerParts) {}

  /** Starts claiming batches; lines go to this gateway's routes at `origin`. */
  start(origin: { host: string; port: number; root: string }): void {
    // A socket for each line the batches may have on their way at once, at their largest.
    const most = linesInFlight(Number.POSITIVE_INFINITY, this.parts.bulkDepth);
    this.client = new LineClient(origin, most * BATCHES_AT_ONCE);
    this.timer = setInterval(() => this.kick(), Math.max(100, this.parts.leaseMs / 2));
    this.kick();
  }

  /** Looks for batches to run now (a batch was just created), rather than at the next turn. */
  kick(): void {
    if (!this.client) return;
    if (this.ticking) {
      this.kicked = true;
      return;
    }
    this.ticking = true;
    this.kicked = false;
    this.tick()
      .catch((err: unknown) => this.parts.logger.warn({ err: String(err) }, 'batches: cannot look for work'))
      .finally(() => {
        this.ticking = false;
        if (this.kicked) this.kick();
      });
  }

  /** Stops running batches and lets their leases go, so that a gateway still up takes them at once. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    const runs = [...this.running.values()];
    for (const run of runs) run.stop.abort();
    await Promise.allSettled(runs.map((run) => run.done));
    this.client?.close();
    this.client = undefined;
  }

  private async tick(): Promise<void> {
    const { redis, files, batches } = this.parts;
    const keys = files.keys;
    const due = await redis.zrangebyscore(keys.expiring(), 0, Date.now(), 'LIMIT', 0, 100);
    for (const member of due) {
      const [kind, id] = member.split(':') as ['file' | 'batch', string];
      await (kind === 'file' ? files.expire(id) : batches.expire(id));
    }
    if (this.running.size >= BATCHES_AT_ONCE) return;
    for (const id of await redis.smembers(keys.active())) {
      if (this.running.size >= BATCHES_AT_ONCE) return;
      if (this.running.has(id)) continue;
      const claimed = await redis.set(keys.lease(id), this.parts.gatewayId, 'PX', this.parts.leaseMs, 'NX');
      if (claimed !== 'OK') continue;
      const stop = new AbortController();
      const done = this.run(id, stop)
        .catch((err: unknown) => this.parts.logger.error({ err: String(err), batch: id }, 'batch: run failed'))
        .finally(() => {
          this.running.delete(id);
          void redis.eval(RELEASE, 1, keys.lease(id), this.parts.gatewayId).catch(() => undefined);
          if (this.client) this.kick();
        });
      this.running.set(id, { stop, done });
    }
  }

  private async run(id: string, stop: AbortController): Promise<void> {
    const { redis, files, batches, gatewayId, leaseMs, logger } = this.parts;
    const renew = setInterval(() => {
      redis
        .eval(RENEW, 1, files.keys.lease(id), gatewayId, leaseMs)
        .then((held) => held === 1 || stop.abort())
        .catch(() => undefined);
    }, leaseMs / 3);
    try {
      const held = await batches.held(id);
      if (!held || ENDED.includes(held.batch.status)) {
        await redis.srem(files.keys.active(), id);
        return;
      }
      const { owner, batch } = held;
      if (batch.status === 'validating') {
        // The model of its first line is the batch's: its lines count in that model's backlog.
        const [first] = await files.readLines(batch.input_file_id, 0, 1);
        const line = first === undefined ? undefined : parseLine(first, batch.endpoint);
        batch.model = line && !isRefusal(line) ? (line.model ?? null) : null;
        batch.status = 'in_progress';
        batch.in_progress_at = nowS();
        await batches.start(batch);
        logger.info({ batch: id, lines: batch.request_counts.total }, 'batch: in progress');
      }
      if (batch.status === 'in_progress') await this.sendLines(owner, batch, stop.signal);
      if (stop.signal.aborted) return;
      const now = (await batches.held(id))?.batch ?? batch;
      const ending = endingOf(now);
      if (ending === undefined) return;
      const ended = await finishBatch({ files, batches }, owner, now, ending);
      logger.info({ batch: id, status: ended.status, counts: ended.request_counts }, 'batch: ended');
    } finally {
      clearInterval(renew);
    }
  }

  /** Sends each line without an answer, a window at a time, until all have one or the batch must stop. */
  private async sendLines(owner: string, batch: BatchObject, signal: AbortSignal): Promise<void> {
    const { files, batches } = this.parts;
    const halt = new AbortController();
    const abort = () => halt.abort();
    signal.addEventListener('abort', abort, { once: true });
    // A cancel, or the end of the batch's window, stops the lines not yet sent within a moment.
    const mustStop = async () => {
      const now = (await batches.held(batch.id))?.batch;
      return !now || now.status === 'cancelling' || nowS() >= now.expires_at;
    };
    const watch = setInterval(() => {
      mustStop()
        .then((yes) => yes && halt.abort())
        .catch(() => undefined);
    }, STOP_CHECK_MS);
    const { models, bulkDepth } = this.parts;
    const slots = new Slots(() => linesInFlight(batch.model ? models.callSequences(batch.model) : 0, bulkDepth));
    const answers = new AnswerBuffer(
      (held) => batches.answer(batch, held),
      (err) =>
        this.parts.logger.warn({ err: String(err), batch: batch.id }, 'batch: answers not stored; sent again later'),
    );
    try {
      const total = batch.request_counts.total;
      for (let start = 0; start < total && !halt.signal.aborted; start += WINDOW) {
        if (await mustStop()) break;
        const count = Math.min(WINDOW, total - start);
        const [answered, lines] = await Promise.all([
          batches.answered(batch.id, start, count),
          files.readLines(batch.input_file_id, start, count),
        ]);
        for (let i = 0; i < count && !halt.signal.aborted; i++) {
          if (answered[i]) continue;
          await slots.take();
          void this.sendLine(owner, batch, start + i, lines[i], halt.signal)
            .then((answer) => answer && answers.add(answer))
            .finally(() => slots.give());
        }
      }
      await slots.drained();
    } finally {
      await answers.flush();
      clearInterval(watch);
      signal.removeEventListener('abort', abort);
      halt.abort();
    }
  }

  private async sendLine(
    owner: string,
    batch: BatchObject,
    index: number,
    text: string | undefined,
    halt: AbortSignal,
  ): Promise<LineAnswer | undefined> {
    const id = lineId(batch.id, index);
    const line = text === undefined ? undefined : parseLine(text, batch.endpoint);
    if (line === undefined || isRefusal(line)) {
      const refusal = line ?? { custom_id: null, code: 'input_file_gone', message: 'the input file was deleted' };
      return { index, line: errorLine(id, refusal.custom_id, refusal.code, refusal.message), ok: false };
    }
    const headers = { ...this.parts.headersFor(owner), 'x-priority': BULK, 'x-wait-for-model': 'true' };
    for (let attempt = 0; !halt.aborted; attempt++) {
      const answer = await this.client?.send(line.url, line.body, headers, halt).catch(() => undefined);
      const kind = answer ? answerKind(answer.status) : 'retry';
      if (answer && kind !== 'retry') return { index, line: answerLine(id, line.custom_id, answer), ok: kind === 'ok' };
      const backoff = Math.min(5000, 50 * 2 ** Math.min(attempt, 7));
      await sleep(Math.max(backoff, Math.min(5000, (answer?.retryAfterS ?? 0) * 1000)) * (0.5 + Math.random()), halt);
    }
    return undefined;
  }
}
