import {
  resultHeadSchema,
  type JobOutcome,
  type OutcomeHead,
  type RequestOutcome,
  type ResultMessage,
} from './wire.js';

/**
 * How a worker writes a JobOutcome, published or recorded (when too large to publish:
 * OUTCOME_MESSAGE_MAX_BYTES), and how a gateway reads it. Written as one JSON text, a gateway would
 * parse every number of an answer and write each one again for its client, on its event loop: for a
 * large answer (a vector per token of many long inputs) that held every other request it serves,
 * and for an embedding it was much of the gateway's own work (bench/HISTORY.md). Written instead as
 * the outcome's JSON with its outputs taken out (the head), a newline, then each output's own JSON
 * one after another, a gateway slices each output's bytes out of what it read and, where its client
 * is answered the outputs as they are (the Hugging Face routes, OpenAI's embeddings), writes those
 * bytes unparsed.
 *
 * JSON.stringify writes a newline inside a string as `\n`, never as the byte, so the first newline
 * byte of a record ends its head.
 */

/** An outcome as a gateway reads it: each output's JSON is at hand as the worker wrote it. */
export type ReadRequestOutcome = RequestOutcome & { outputsJson?: Buffer[] };

export interface ReadJobOutcome extends Omit<JobOutcome, 'outcomes'> {
  outcomes: ReadRequestOutcome[];
}

/** A result message as a gateway reads it: an outcome's outputs as their worker wrote them. */
export type ReadResultMessage = Exclude<ResultMessage, JobOutcome> | ReadJobOutcome;

/**
 * The record of `outcome`, for a worker to publish or store. Each output's JSON becomes bytes as
 * soon as it is written, outside the JS heap, so that the worker's heap holds one output's text at a
 * time, not the whole record beside the outputs themselves.
 */
export function encodeRecordedOutcome(outcome: JobOutcome): Buffer {
  const parts: Buffer[] = [];
  const head: OutcomeHead = {
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

/** A result message as a worker publishes it: an outcome as its record, the others as JSON. */
export function encodeResultMessage(message: ResultMessage): Buffer {
  return message.kind === 'outcome' ? encodeRecordedOutcome(message) : Buffer.from(JSON.stringify(message));
}

/**
 * A message heard on a gateway's result channel, or a record read back from where a worker stored
 * it, read against its schema: undefined where it is not one, or its outputs' lengths do not add up
 * to what follows its head.
 */
export function readResultMessage(message: Buffer): ReadResultMessage | undefined {
  const newline = message.indexOf(10);
  const end = newline === -1 ? message.length : newline;
  let raw: unknown;
  try {
    raw = JSON.parse(message.toString('utf8', 0, end));
  } catch {
    return undefined;
  }
  const head = resultHeadSchema.safeParse(raw);
  if (!head.success) return undefined;
  if (head.data.kind !== 'outcome') return head.data;
  let bytes = 0;
  for (const o of head.data.outcomes) if (o.ok) for (const n of o.outputBytes) bytes += n;
  return newline !== -1 && bytes === message.length - end - 1 ? withOutputs(head.data, message, end + 1) : undefined;
}

/**
 * The outcome of `head`, each ok outcome's `outputsJson` sliced from `record` from `offset` on (not
 * copied); its `outputs` are parsed from them only when something reads them.
 */
function withOutputs(head: OutcomeHead, record: Buffer, offset: number): ReadJobOutcome {
  const outcomes = head.outcomes.map((o): ReadRequestOutcome => {
    if (!o.ok) return o;
    const { outputBytes, ...rest } = o;
    return answeredFromJson(
      outputBytes.map((bytes) => record.subarray(offset, (offset += bytes))),
      rest,
    );
  });
  return { ...head, outcomes };
}

/** An answered outcome as a gateway reads it: its outputs at hand as their JSON, parsed only when read. */
export type AnsweredFromJson = Extract<ReadRequestOutcome, { ok: true }>;

/** The answered outcome of `rest` whose outputs are `outputsJson`, parsed the first time something reads them. */
export function answeredFromJson(
  outputsJson: Buffer[],
  rest: Omit<AnsweredFromJson, 'outputs' | 'outputsJson'>,
): AnsweredFromJson {
  let outputs: unknown[] | undefined;
  return Object.defineProperty({ ...rest, outputsJson } as AnsweredFromJson, 'outputs', {
    get: () => (outputs ??= outputsJson.map((json) => JSON.parse(json.toString('utf8')) as unknown)),
    enumerable: true,
  });
}
