import type { z } from 'zod';

/**
 * Reading a client's JSON leniently: fields a schema does not know are left out and named, never
 * refused, as TEI, vLLM and Infinity do (clients add vendor fields, and frameworks send the
 * options of other servers); the fields a schema knows keep every check. The schemas stay strict,
 * so that what is unknown is found by zod itself, where it is, whatever the nesting.
 */

export type LenientParse<T> =
  { success: true; data: T; ignored: string[] } | { success: false; error: z.ZodError; ignored: string[] };

/** Unknown fields are this deep in a body at most: each round of a parse leaves out one level's. */
const MOST_ROUNDS = 8;

/** The unknown fields of one object: where it is, and their keys. */
interface Unknown {
  path: PropertyKey[];
  keys: string[];
}

/**
 * Parses `value` with a strict `schema`, leaving out the fields it refuses as unknown. A body
 * without unknown fields is parsed once, as `safeParse` would. `ignored` names each field left out
 * by its dotted path (`options.use_gpu`, `inputs.0.extra`), as errors name fields.
 */
export function parseLenient<T extends z.ZodType>(schema: T, value: unknown): LenientParse<z.output<T>> {
  let parsed = schema.safeParse(value);
  const ignored: string[] = [];
  let current = value;
  for (let round = 0; !parsed.success && round < MOST_ROUNDS; round++) {
    const unknown = unknownFields(parsed.error.issues, []);
    if (!unknown.length) break;
    // One copy per object, whatever the number of its unknown fields: a body of 50,000 costs one.
    for (const { path, keys } of unknown) {
      current = without(current, path, keys);
      const at = path.map(String);
      for (const key of keys) ignored.push([...at, key].join('.'));
    }
    parsed = schema.safeParse(current);
  }
  return parsed.success
    ? { success: true, data: parsed.data, ignored }
    : { success: false, error: parsed.error, ignored };
}

/**
 * The fields zod refused as unknown. Within a union, the fields of the one member that fails for
 * unknown fields alone: the member the client meant.
 */
function unknownFields(issues: readonly z.core.$ZodIssue[], prefix: PropertyKey[]): Unknown[] {
  const found: Unknown[] = [];
  for (const issue of issues) {
    const path = [...prefix, ...issue.path];
    if (issue.code === 'unrecognized_keys') found.push({ path, keys: issue.keys });
    else if (issue.code === 'invalid_union') {
      const meant = issue.errors.filter((member) => member.length > 0 && member.every(onlyUnknown));
      if (meant.length === 1) found.push(...unknownFields(meant[0], path));
    }
  }
  return found;
}

const onlyUnknown = (issue: z.core.$ZodIssue): boolean =>
  issue.code === 'unrecognized_keys' ||
  (issue.code === 'invalid_union' && issue.errors.some((member) => member.length > 0 && member.every(onlyUnknown)));

/** `value` with the fields `keys` of the object at `path` left out; copied along the path, never changed. */
function without(value: unknown, path: PropertyKey[], keys: readonly string[]): unknown {
  if (typeof value !== 'object' || value === null) return value;
  if (path.length === 0) {
    if (Array.isArray(value)) return value;
    // The fields kept are the ones the schema knows: never `__proto__`, which this assignment would set.
    const unknown = new Set(keys);
    const copy: Record<string, unknown> = {};
    for (const [key, field] of Object.entries(value)) if (!unknown.has(key)) copy[key] = field;
    return copy;
  }
  const [head, ...rest] = path;
  if (Array.isArray(value)) {
    const copy = value.slice();
    copy[Number(head)] = without(value[Number(head)], rest, keys);
    return copy;
  }
  const record = value as Record<PropertyKey, unknown>;
  return { ...record, [head]: without(record[head], rest, keys) };
}
