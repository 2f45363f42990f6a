import { z } from 'zod';

/**
 * Every error a client can see, as one JSON shape: `{"error": "...", "error_type": "..."}`.
 * Workers send these back through Redis, so an error keeps its status across processes.
 */

export const ERROR_STATUS = {
  validation: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  unsupported_media_type: 415,
  payload_too_large: 413,
  rate_limited: 429,
  inference: 422,
  internal: 500,
  overloaded: 503,
  unavailable: 503,
  timeout: 504,
  /** The store of batches' files holds its bound (FILES_STORE_MAX_MB). */
  insufficient_storage: 507,
  /** The client left before its request ran; it was skipped. Nobody reads this answer (nginx's 499). */
  cancelled: 499,
} as const;

export type ErrorType = keyof typeof ERROR_STATUS;

/** The native error body; the OpenAPI document (apps/gateway/src/ops/openapi.ts) describes it from this schema. */
export const errorBodySchema = z.strictObject({
  error: z.string(),
  error_type: z.enum(Object.keys(ERROR_STATUS) as [ErrorType, ...ErrorType[]]),
  /** For a model still loading: seconds until it is likely ready (the Inference API's field). */
  estimated_time: z
    .number()
    .optional()
    .meta({ description: 'for a model still loading: seconds until it is likely ready' }),
});
export type ErrorBody = z.infer<typeof errorBodySchema>;

/** The longest error message a client is sent; messages name the first few offenders (firstFew) well within it. */
const MESSAGE_CHARS_AT_MOST = 1000;

export class ApiError extends Error {
  readonly status: number;
  constructor(
    readonly type: ErrorType,
    message: string,
    /** Seconds a client should wait before retrying (503s). */
    readonly retryAfterSeconds?: number,
    /** Fields the body carries besides the message and type. */
    readonly extra: Pick<ErrorBody, 'estimated_time'> = {},
  ) {
    // An ApiError is an answer, not a fault: it never leaves with a stack, and under overload every
    // refused request makes one, so the stack is not captured at all (a twentieth of a shed's cost).
    const stackFrames = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    // Bounded whatever a message quotes of a request: an error never echoes a request at length.
    super(message.length > MESSAGE_CHARS_AT_MOST ? `${message.slice(0, MESSAGE_CHARS_AT_MOST)}…` : message);
    Error.stackTraceLimit = stackFrames;
    this.name = 'ApiError';
    this.status = ERROR_STATUS[type];
  }

  toBody(): ErrorBody {
    return { error: this.message, error_type: this.type, ...this.extra };
  }

  static fromBody(body: ErrorBody): ApiError {
    return new ApiError(body.error_type in ERROR_STATUS ? body.error_type : 'internal', body.error);
  }
}
