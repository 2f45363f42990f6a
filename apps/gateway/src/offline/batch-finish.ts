import type { Redis } from 'ioredis';
import type { FileStore } from './files.js';
import { errorLine, lineId } from './batch-lines.js';
import { nowS, type BatchObject, type BatchStatus, type BatchStore } from './batches.js';

/** Lines read and written at a time as a batch's answers are made into files. */
const LINES_AT_ONCE = 1000;

export type Ending = Extract<BatchStatus, 'completed' | 'expired' | 'cancelled' | 'failed'>;

/**
 * Ends a batch: its answers, in the order of its input lines, become its output file (2xx) and
 * its error file (the rest), and it takes its last status. A batch that expired also answers
 * each line it did not run, in the error file, as `batch_expired` (as OpenAI's does); a cancelled
 * one leaves them out. Safe to do again from the start (a runner that died part way): the files'
 * lists are written afresh under ids fixed by the batch.
 */
export async function finishBatch(
  parts: { redis: Redis; files: FileStore; batches: BatchStore },
  owner: string,
  batch: BatchObject,
  ending: Ending,
): Promise<BatchObject> {
  const { redis, files, batches } = parts;
  const keys = files.keys;
  const at = nowS();
  if (ending === 'completed' || ending === 'expired') {
    batch.status = 'finalizing';
    batch.finalizing_at = at;
    await batches.write(batch);
  }
  const output = { id: `${batch.id.replace(/^batch-/, 'file-')}-output`, bytes: 0, lines: 0 };
  const errors = { id: `${batch.id.replace(/^batch-/, 'file-')}-errors`, bytes: 0, lines: 0 };
  await redis.del(keys.lines(output.id), keys.lines(errors.id));
  const total = batch.request_counts.total;
  for (let start = 0; start < total; start += LINES_AT_ONCE) {
    const answers = await batches.answers(batch.id, start, Math.min(LINES_AT_ONCE, total - start));
    const ok: string[] = [];
    const failed: string[] = [];
    for (const [i, answer] of answers.entries()) {
      if (answer !== null) (answer.ok ? ok : failed).push(answer.line);
      else if (ending === 'expired')
        failed.push(
          errorLine(lineId(batch.id, start + i), null, 'batch_expired', 'the batch expired before this line ran'),
        );
    }
    for (const [file, lines] of [
      [output, ok],
      [errors, failed],
    ] as const) {
      if (lines.length === 0) continue;
      await redis.rpush(keys.lines(file.id), ...lines);
      file.lines += lines.length;
      file.bytes += lines.reduce((sum, line) => sum + Buffer.byteLength(line) + 1, 0);
    }
  }
  const filename = (kind: string) => `${batch.id}_${kind}.jsonl`;
  if (output.lines > 0) await files.record(owner, { filename: filename('output'), purpose: 'batch_output', ...output });
  if (errors.lines > 0) await files.record(owner, { filename: filename('error'), purpose: 'batch_output', ...errors });
  // The answers are in the files now: what they held in the store is counted there instead.
  const held = await batches.resultBytes(batch.id);
  await redis
    .multi()
    .del(keys.results(batch.id))
    .hset(keys.batch(batch.id), 'result_bytes', 0)
    .decrby(keys.bytes(), held)
    .exec();
  const counts = (await batches.held(batch.id))?.batch.request_counts ?? batch.request_counts;
  const unanswered = counts.total - counts.completed - counts.failed;
  const ended: BatchObject = {
    ...batch,
    status: ending,
    output_file_id: output.lines > 0 ? output.id : null,
    error_file_id: errors.lines > 0 ? errors.id : null,
    request_counts: {
      ...counts,
      failed: counts.failed + (ending === 'expired' ? unanswered : 0),
    },
    [`${ending}_at`]: at,
  };
  await batches.end(ended, unanswered);
  return ended;
}
