import type { FileStore } from './files.js';
import { expiredLine } from './batch-lines.js';
import type { BatchStore } from './batches.js';
import { nowS, type BatchObject, type BatchStatus } from './batch-object.js';

/** Lines read and written at a time as a batch's answers are made into files. */
const LINES_AT_ONCE = 1000;

export type Ending = Extract<BatchStatus, 'completed' | 'expired' | 'cancelled'>;

/**
 * Ends a batch: its answers, in the order of its input lines, move into its output file (2xx) and
 * its error file (the rest), and it takes its last status. A batch that expired also answers
 * each line it did not run, in the error file, as `batch_expired` (as OpenAI's does); a cancelled
 * one leaves them out. The answers move inside Redis, a thousand at a time, each move in one step
 * with the record of how far it came, so they are held once throughout, never cross to the
 * gateway and back, and a runner that died part way is followed by one that goes on from there. The files are recorded in the step that ends the
 * batch.
 */
export async function finishBatch(
  parts: { files: FileStore; batches: BatchStore },
  owner: string,
  batch: BatchObject,
  ending: Ending,
): Promise<BatchObject> {
  const { files, batches } = parts;
  const at = nowS();
  if ((ending === 'completed' || ending === 'expired') && batch.status !== 'finalizing') {
    batch.status = 'finalizing';
    batch.finalizing_at = at;
    await batches.write(batch);
  }
  const ids = {
    output: `${batch.id.replace(/^batch-/, 'file-')}-output`,
    errors: `${batch.id.replace(/^batch-/, 'file-')}-errors`,
  };
  const counts = batch.request_counts;
  const unanswered = counts.total - counts.completed - counts.failed;
  const total = counts.total;
  const expired = ending === 'expired' ? expiredLine(batch.id) : undefined;
  for (let start = (await batches.finished(batch.id)).upto; start < total; start += LINES_AT_ONCE)
    await batches.move(batch.id, start, Math.min(LINES_AT_ONCE, total - start), ids, expired);
  const { output, errors } = await batches.finished(batch.id);
  const ended: BatchObject = {
    ...batch,
    status: ending,
    output_file_id: output.lines > 0 ? ids.output : null,
    error_file_id: errors.lines > 0 ? ids.errors : null,
    request_counts: { ...counts, failed: counts.failed + (ending === 'expired' ? unanswered : 0) },
    [`${ending}_at`]: at,
  };
  const multi = batches.multi();
  const filename = (kind: string) => `${batch.id}_${kind}.jsonl`;
  if (output.lines > 0)
    files.record(multi, owner, { id: ids.output, filename: filename('output'), purpose: 'batch_output', ...output });
  if (errors.lines > 0)
    files.record(multi, owner, { id: ids.errors, filename: filename('error'), purpose: 'batch_output', ...errors });
  batches.end(multi, ended, unanswered);
  await multi.exec();
  return ended;
}
