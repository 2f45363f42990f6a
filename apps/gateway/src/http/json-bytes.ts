import type { Response } from 'express';

/**
 * Answers written from JSON a worker already wrote (an outcome's outputs: readResultMessage), as
 * `res.json` would write the values that JSON holds, without parsing each number to write it again.
 */

const OPEN = Buffer.from('[');
const COMMA = Buffer.from(',');
const CLOSE = Buffer.from(']');

/** The JSON list of items given as their JSON. */
export function jsonList(items: Buffer[]): Buffer {
  return Buffer.concat([OPEN, ...items.flatMap((item, i) => (i ? [COMMA, item] : [item])), CLOSE]);
}

/** Sends a JSON body given as bytes, with `res.json`'s content type. */
export function sendJson(res: Response, body: Buffer): void {
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.send(body);
}
