import express, { type Request, type RequestHandler, type Response } from 'express';
import { isUtf8 } from 'node:buffer';
import type { GatewayConfig } from '@tserve/config';
import { bodyRefusal } from './http-server.js';

/**
 * A request's body as the routes read it: JSON, text or bytes, at most MAX_BODY_BYTES, refused
 * where it is not UTF-8 (JSON, text) or was dropped part way for want of room.
 */

/** A body dropped part way for want of room (http-server.ts) is never parsed as if it were whole. */
const rejectRefused = (req: unknown) => {
  const refusal = bodyRefusal(req);
  if (refusal) throw refusal;
};

const rejectInvalidUtf8 = (req: unknown, _res: unknown, buf: Buffer) => {
  rejectRefused(req);
  if (!isUtf8(buf)) throw Object.assign(new Error('invalid UTF-8'), { type: 'invalid.utf8', status: 400 });
};

export function jsonBody(config: GatewayConfig): RequestHandler {
  return express.json({ limit: config.MAX_BODY_BYTES, strict: false, verify: rejectInvalidUtf8 });
}

/** The body as bytes, whatever its content type: for a protocol that reads it itself. */
export function rawBody(config: GatewayConfig): RequestHandler {
  return express.raw({ limit: config.MAX_BODY_BYTES, type: () => true, verify: rejectRefused });
}

export function textBody(config: GatewayConfig): RequestHandler {
  return express.text({ limit: config.MAX_BODY_BYTES, type: () => true, verify: rejectInvalidUtf8 });
}

export function isJson(req: Request): boolean {
  return req.is('application/json') === 'application/json' || Boolean(req.is('+json'));
}

/** Reads the body with `parser` (`jsonBody`'s, `textBody`'s) into `req.body`: for a route that reads it itself, once admitted. */
export function readBody(parser: RequestHandler, req: Request, res: Response): Promise<void> {
  return new Promise((resolve, reject) => {
    // Express's error handlers take what body-parser passes on (an Error with its status) as it is.
    void parser(req, res, (err?: unknown) => {
      if (err === undefined) resolve();
      else reject(err instanceof Error ? err : new Error(`the body could not be read: ${JSON.stringify(err)}`));
    });
  });
}
