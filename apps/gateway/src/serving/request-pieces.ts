import { answeredFromJson, type ReadRequestOutcome, type RequestTiming } from '@tserve/contract';

/**
 * A request larger than one job of its model (more sequences than its workers' smallest batch) goes
 * as pieces: each a request of its own, in its own job, which any worker may take, so that a client's
 * list of 2,048 texts runs on every worker at once, as 64 clients' lists of 32 would, and waits in
 * the queue no longer than they. The pieces' outcomes are joined here into the one the client is
 * answered, in order.
 */

/** The id of a request's piece `index` (from 0): unique, as a job's id must be, and the request's own in the logs. */
export const pieceId = (requestId: string, index: number) => `${requestId}-piece${index + 1}`;

/** The one outcome of a request sent as `pieces`, in order: the first refused piece's, else every piece's outputs together. */
export function joinPieces(pieces: ReadRequestOutcome[]): ReadRequestOutcome {
  const id = pieces[0].id;
  const answered: Array<Extract<ReadRequestOutcome, { ok: true }>> = [];
  for (const piece of pieces) {
    if (!piece.ok) return { ...piece, id };
    answered.push(piece);
  }
  const rest = {
    id,
    ok: true as const,
    warnings: [...new Set(answered.flatMap((p) => p.warnings))],
    timing: joinTimings(answered.map((p) => p.timing)),
    ...(answered.every((p) => p.tokens) ? { tokens: answered.flatMap((p) => p.tokens ?? []) } : {}),
  };
  // As their workers wrote them where every piece's are at hand: written to the client unparsed.
  if (answered.every((p) => p.outputsJson))
    return answeredFromJson(
      answered.flatMap((p) => p.outputsJson ?? []),
      rest,
    );
  return { ...rest, outputs: answered.flatMap((p) => p.outputs) };
}

/** The pieces' timing as one request's: the longest wait, their model calls' time together, the largest batch. */
function joinTimings(timings: RequestTiming[]): RequestTiming {
  return {
    queue_ms: Math.max(...timings.map((t) => t.queue_ms)),
    inference_ms: timings.reduce((sum, t) => sum + t.inference_ms, 0),
    batch_size: Math.max(...timings.map((t) => t.batch_size)),
  };
}
