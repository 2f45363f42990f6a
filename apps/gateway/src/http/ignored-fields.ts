import type { Request, Response } from 'express';
import type { z } from 'zod';
import { ApiError, describeIssues, parseLenient } from '@tserve/contract';

/**
 * The fields of a request that were left out, unknown (`parseLenient`): named to the client in
 * `x-ignored-fields` and in the request's log line, so that a misspelt option is seen, not silently
 * lost. Only where there are some: a request without unknown fields carries no header.
 */

const IGNORED_FIELDS_HEADER = 'x-ignored-fields';

/** Fields named in the header at most; a body of thousands of unknown fields is not echoed back. */
const MOST_NAMED = 20;
/** A field's name is cut to this: the header quotes what a client sent. */
const NAME_CHARS_AT_MOST = 64;

/**
 * A route's JSON body parsed against its schema: a missing body or a known field's bad value is a
 * 400 `validation` error; fields the schema does not know are left out and named in the answer.
 */
export function readLenient<T extends z.ZodType>(
  schema: T,
  req: Request,
  res: Response,
  missing = 'send a JSON body with Content-Type: application/json',
): z.output<T> {
  if (req.body === undefined) throw new ApiError('validation', missing);
  const parsed = parseLenient(schema, req.body);
  if (!parsed.success) throw new ApiError('validation', describeIssues(parsed.error));
  noteIgnored(res, parsed.ignored);
  return parsed.data;
}

/** Adds `fields` to those the answer names as ignored. */
export function noteIgnored(res: Response, fields: readonly string[]): void {
  if (!fields.length) return;
  const all = [...ignoredOf(res), ...fields];
  res.locals.ignoredFields = all;
  if (res.headersSent) return;
  const named = all.slice(0, MOST_NAMED).map(headerSafe);
  if (all.length > MOST_NAMED) named.push(`(${all.length - MOST_NAMED} more)`);
  res.setHeader(IGNORED_FIELDS_HEADER, named.join(', '));
}

/** The fields the request's answer named as ignored. */
export function ignoredOf(res: Response): string[] {
  return (res.locals.ignoredFields as string[] | undefined) ?? [];
}

/** A field's name as a header may carry it: percent-encoded past printable ASCII, commas and spaces. */
function headerSafe(field: string): string {
  const cut = field.length > NAME_CHARS_AT_MOST ? `${field.slice(0, NAME_CHARS_AT_MOST)}…` : field;
  return cut.replace(/[^\x21-\x2b\x2d-\x7e]/gu, (c) => encodeURIComponent(c));
}
