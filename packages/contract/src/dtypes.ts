/**
 * Weights whose answers depend on what else is in the batch. Dynamic int8 quantization scales each
 * call's activations by the range of the whole tensor, padding included, so the same input batched
 * with other inputs gets a slightly different answer than alone. fp32, fp16 and int8-row (a scale
 * per row) compute each row independently of its batch mates.
 */
const BATCH_DEPENDENT = new Set(['q8', 'int8', 'uint8']);

/** What `/ready`, `/info` and the start-up log say about a dtype whose answers shift with batch mates; undefined for one whose do not. */
export function batchDependence(dtype: string): string | undefined {
  if (!BATCH_DEPENDENT.has(dtype)) return undefined;
  return (
    `${dtype} (dynamic int8) answers shift with their batch mates: the same input can score differently alone and batched ` +
    '(docs/models.md, "Answers that do not depend on batch mates"); DTYPE=int8-row (int8 with a scale per row) or DTYPE=fp32 answers the same whatever the batch'
  );
}

/** `{ warning }` when any of a model's workers answers with a batch-dependent dtype, for `/ready` and `/info`; else nothing. */
export function batchWarning(workers: Array<{ dtype: string }>): { warning?: string } {
  const warning = workers.map((w) => batchDependence(w.dtype)).find((w) => w !== undefined);
  return warning ? { warning } : {};
}
