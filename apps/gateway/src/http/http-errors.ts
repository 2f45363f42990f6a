import type { ErrorRequestHandler, Request, Response } from 'express';
import type { Logger } from 'pino';
import { ApiError } from '@tserve/contract';
import { requestIdOf } from './request-id.js';
import { bodyRefusal } from './http-server.js';

/** How a protocol writes an error: its status and body. The native shape is `{"error", "error_type"}`. */
export type ErrorFormat = (error: ApiError) => { status: number; body: unknown };

const nativeErrors: ErrorFormat = (error) => ({ status: error.status, body: error.toBody() });

/** The error a response answered, for its request's log line. */
export function answeredError(res: Response): ApiError | undefined {
  return res.locals.answeredError as ApiError | undefined;
}

export function sendError(res: Response, error: ApiError, format: ErrorFormat = nativeErrors): void {
  res.locals.answeredError = error;
  if (error.retryAfterSeconds !== undefined) res.setHeader('Retry-After', String(error.retryAfterSeconds));
  const { status, body } = format(error);
  res.status(status).json(body);
}

/** A body that is not JSON: what body-parser reports, and what a route that parses its own body says too. */
export const malformedJson = (detail: string) => new ApiError('validation', `malformed JSON body: ${detail}`);

/** A body over MAX_BODY_BYTES, told apart from other 413s (too many inputs) for protocols that answer them differently. */
export class BodyTooLarge extends ApiError {
  constructor(limit: number | undefined) {
    super('payload_too_large', `request body is larger than ${limit} bytes (MAX_BODY_BYTES)`);
  }
}

/** A path whose %-escapes do not decode (the router's URIError): the client's to fix, in the route's error shape. */
const malformedUrl = () =>
  new ApiError('validation', 'malformed URL: a %-escape in the path does not decode to UTF-8 text');

/** A body that is not UTF-8 text, likewise. */
export const invalidUtf8 = () => new ApiError('validation', 'request body is not valid UTF-8');

type BodyParserError = { type?: string; message?: string; limit?: number; status?: number; errno?: unknown };

/** body-parser's failures, turned into errors that say what to fix. */
function fromBodyParser(err: BodyParserError, req: Request): ApiError | undefined {
  switch (err.type) {
    case 'entity.parse.failed':
      return malformedJson(err.message ?? 'could not parse');
    case 'entity.too.large':
      return new BodyTooLarge(err.limit);
    case 'encoding.unsupported':
    case 'charset.unsupported':
      return new ApiError('unsupported_media_type', `unsupported body encoding: ${err.message}`);
    case 'request.aborted':
      return new ApiError('validation', 'request body was aborted by the client');
    case 'invalid.utf8':
      return invalidUtf8();
    default:
      // A body that does not decompress: body-parser passes zlib's own error on, with status 400 and no type.
      if (err.status === 400 && typeof err.errno === 'number') {
        return new ApiError(
          'validation',
          `request body could not be decompressed (content-encoding ${req.get('content-encoding')}): ${err.message}`,
        );
      }
      return undefined;
  }
}

/**
 * Last middleware (of the app, or mounted on a protocol's paths with that protocol's `format`): every
 * error becomes an answer in the protocol's error shape; nothing leaks a stack trace. An error the
 * server meant to answer is logged once, on its request's line (request-log.ts): a 503 storm under
 * overload writes one line per refusal, not two.
 */
export function errorHandler(logger: Logger, format: ErrorFormat = nativeErrors): ErrorRequestHandler {
  return (err, req, res, _next) => {
    // A body refused while it arrived: the parser may have failed on what was dropped of it.
    const refused = bodyRefusal(req);
    const api =
      refused instanceof ApiError
        ? refused
        : err instanceof ApiError
          ? err
          : err instanceof URIError
            ? malformedUrl()
            : fromBodyParser(err as BodyParserError, req);
    if (api) {
      sendError(res, api, format);
      return;
    }
    logger.error(
      { reqId: requestIdOf(res), err: err instanceof Error ? { message: err.message, stack: err.stack } : String(err) },
      'unhandled error',
    );
    sendError(res, new ApiError('internal', 'internal server error'), format);
  };
}
