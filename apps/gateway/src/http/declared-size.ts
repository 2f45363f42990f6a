import type { RequestHandler } from 'express';
import { BodyTooLarge } from './http-errors.js';

/**
 * A body declared larger than MAX_BODY_BYTES is refused at once, before a byte of it is read (and
 * before `100 Continue`, which is sent only once a route reads the body: http-server.ts). The
 * answer closes the connection, so the server does not go on receiving what it refused. Before
 * every route, so that each answers in its protocol's error shape.
 */
export function refuseDeclaredOversize(maxBytes: number): RequestHandler {
  return (req, res, next) => {
    const declared = Number(req.headers['content-length']);
    if (declared > maxBytes) {
      res.setHeader('Connection', 'close');
      next(new BodyTooLarge(maxBytes));
      return;
    }
    next();
  };
}
