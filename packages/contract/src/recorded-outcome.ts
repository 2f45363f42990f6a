import type { JobOutcome, RequestOutcome } from './wire.js';

/**
 * How a worker records a JobOutcome too large to publish (OUTCOME_MESSAGE_MAX_BYTES), and how a
 * gateway reads it back. Recorded as one JSON text, a gateway would parse every number of an answer
 * and write each one again for its client, on its event loop, which for a large answer (a vector
 * per token of many long inputs) holds every other request it serves (bench/HISTORY.md). Recorded
 * instead as the outcome's JSON with its outputs taken out, a newline, then each output's own JSON
 * one after another, a gateway slices each output's bytes out of what it read and, where its
 * client is answered the outputs as they are (the Hugging Face routes), writes those bytes
 * unparsed.
 *
 * JSON.stringify writes a newline inside a string as `\n`, never as the byte, so the first newline
 * byte of a record ends its outcome.
 */

/** An ok outcome's place in a record: the byte length of each output's JSON, in order, where its `outputs` were. */
type RecordedOk = Omit<Extract<RequestOutcome, { ok: true }>, 'outputs'> & { outputBytes: number[] };

interface RecordedHead extends Omit<JobOutcome, 'outcomes'> {
  outcomes: Array<RecordedOk | Extract<RequestOutcome, { ok: false }>>;
}

/** An outcome as a gateway reads it from a record: each output's JSON is at hand as the worker wrote it. */
export type ReadRequestOutcome = RequestOutcome & { outputsJson?: Buffer[] };

export interface ReadJobOutcome extends Omit<JobOutcome, 'outcomes'> {
  outcomes: ReadRequestOutcome[];
}

/**
 * The record of `outcome`, for a worker to store. Each output's JSON becomes bytes as soon as it is
 * written, outside the JS heap, so that the worker's heap holds one output's text at a time, not
 * the whole record beside the outputs themselves.
 */
export function encodeRecordedOutcome(outcome: JobOutcome): Buffer {
  const parts: Buffer[] = [];
  const head: RecordedHead = {
    ...outcome,
    outcomes: outcome.outcomes.map((o) => {
      if (!o.ok) return o;
      const { outputs, ...rest } = o;
      const json = outputs.map((output) => Buffer.from(JSON.stringify(output)));
      parts.push(...json);
      return { ...rest, outputBytes: json.map((bytes) => bytes.length) };
    }),
  };
  return Buffer.concat([Buffer.from(`${JSON.stringify(head)}\n`), ...parts]);
}

/**
 * A record read back. Each ok outcome's `outputsJson` are slices of `record`, not copies; its
 * `outputs` are parsed from them only when something reads them.
 */
export function decodeRecordedOutcome(record: Buffer): ReadJobOutcome {
  const end = record.indexOf(10);
  const head = JSON.parse(record.toString('utf8', 0, end)) as RecordedHead;
  let offset = end + 1;
  const outcomes = head.outcomes.map((o): ReadRequestOutcome => {
    if (!('outputBytes' in o)) return o;
    const { outputBytes, ...rest } = o;
    const outputsJson = outputBytes.map((bytes) => record.subarray(offset, (offset += bytes)));
    let outputs: unknown[] | undefined;
    return Object.defineProperty({ ...rest, outputsJson } as ReadRequestOutcome, 'outputs', {
      get: () => (outputs ??= outputsJson.map((json) => JSON.parse(json.toString('utf8')) as unknown)),
      enumerable: true,
    });
  });
  return { ...head, outcomes };
}
