import type { ErrorRequestHandler, Response } from 'express';
import type { Logger } from 'pino';
import { ApiError } from '@tserve/contract';

export function sendError(res: Response, error: ApiError): void {
  if (error.retryAfterSeconds !== undefined) res.setHeader('Retry-After', String(error.retryAfterSeconds));
  res.status(error.status).json(error.toBody());
}

/** body-parser's failures, turned into errors that say what to fix. */
function fromBodyParser(err: { type?: string; message?: string; limit?: number }): ApiError | undefined {
  switch (err.type) {
    case 'entity.parse.failed':
      return new ApiError('validation', `malformed JSON body: ${err.message ?? 'could not parse'}`);
    case 'entity.too.large':
      return new ApiError('payload_too_large', `request body is larger than ${err.limit} bytes (MAX_BODY_BYTES)`);
    case 'encoding.unsupported':
    case 'charset.unsupported':
      return new ApiError('unsupported_media_type', `unsupported body encoding: ${err.message}`);
    case 'request.aborted':
      return new ApiError('validation', 'request body was aborted by the client');
    case 'invalid.utf8':
      return new ApiError('validation', 'request body is not valid UTF-8');
    default:
      return undefined;
  }
}

/** Last middleware: every error becomes `{"error", "error_type"}`; nothing leaks a stack trace. */
export function errorHandler(logger: Logger): ErrorRequestHandler {
  return (err, _req, res, _next) => {
    const api = err instanceof ApiError ? err : fromBodyParser(err);
    if (api) {
      if (api.status >= 500) logger.warn({ status: api.status, error_type: api.type }, api.message);
      sendError(res, api);
      return;
    }
    logger.error({ err: err instanceof Error ? { message: err.message, stack: err.stack } : String(err) }, 'unhandled error');
    sendError(res, new ApiError('internal', 'internal server error'));
  };
}
