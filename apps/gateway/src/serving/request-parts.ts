import { answeredFromJson, type ReadRequestOutcome, type RequestTiming } from '@tserve/contract';

/**
 * A request larger than one job of its model (more sequences than its workers' smallest batch) goes
 * as parts: each a request of its own, in its own job, which any worker may take, so that a client's
 * list of 2,048 texts runs on every worker at once, as 64 clients' lists of 32 would, and waits in
 * the queue no longer than they. The parts' outcomes are joined here into the one the client is
 * answered, in order.
 */

/** The id of a request's part `index` (from 0): unique, as a job's id must be, and the request's own in the logs. */
export const partId = (requestId: string, index: number) => `${requestId}-part${index + 1}`;

/** The one outcome of a request sent as `parts`, in order: the first refused part's, else every part's outputs together. */
export function joinParts(parts: ReadRequestOutcome[]): ReadRequestOutcome {
  const id = parts[0].id;
  const answered: Array<Extract<ReadRequestOutcome, { ok: true }>> = [];
  for (const part of parts) {
    if (!part.ok) return { ...part, id };
    answered.push(part);
  }
  const rest = {
    id,
    ok: true as const,
    warnings: [...new Set(answered.flatMap((p) => p.warnings))],
    timing: joinTimings(answered.map((p) => p.timing)),
    ...(answered.every((p) => p.tokens) ? { tokens: answered.flatMap((p) => p.tokens ?? []) } : {}),
  };
  // As their workers wrote them where every part's are at hand: written to the client unparsed.
  if (answered.every((p) => p.outputsJson))
    return answeredFromJson(
      answered.flatMap((p) => p.outputsJson ?? []),
      rest,
    );
  return { ...rest, outputs: answered.flatMap((p) => p.outputs) };
}

/** The parts' timing as one request's: the longest wait, their model calls' time together, the largest batch. */
function joinTimings(timings: RequestTiming[]): RequestTiming {
  return {
    queue_ms: Math.max(...timings.map((t) => t.queue_ms)),
    inference_ms: timings.reduce((sum, t) => sum + t.inference_ms, 0),
    batch_size: Math.max(...timings.map((t) => t.batch_size)),
  };
}
