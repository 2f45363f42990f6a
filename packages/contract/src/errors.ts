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

/** Turns zod issues into one sentence a client can act on; paths are prefixed with `prefix` (e.g. "parameters"). */
export function describeIssues(error: z.ZodError, prefix?: string): string {
  const sentences = flatten(error.issues).map((issue) => {
    const path = clip([...(prefix ? [prefix] : []), ...issue.path.map(String)].join('.')) || 'body';
    if (issue.code === 'unrecognized_keys')
      return `${path}: unknown field(s) ${firstFew(issue.keys.map((k) => `"${clip(k)}"`))}`;
    return `${path}: ${issue.message}`;
  });
  return firstFew(sentences, '; ');
}

/**
 * How many offenders an error names: a request with 50,000 unknown keys is told of the first few
 * and how many more, not echoed back whole (each named one clipped too).
 */
const NAMED_AT_MOST = 5;
const NAME_CHARS_AT_MOST = 64;

/** `items` joined, the first few of them, and how many were left out. */
function firstFew(items: string[], separator = ', '): string {
  const named = items.slice(0, NAMED_AT_MOST).join(separator);
  return items.length > NAMED_AT_MOST ? `${named}${separator}and ${items.length - NAMED_AT_MOST} more` : named;
}

/** A client's text as an error names it: at most NAME_CHARS_AT_MOST characters. */
export function clip(text: string): string {
  return text.length > NAME_CHARS_AT_MOST ? `${text.slice(0, NAME_CHARS_AT_MOST)}…` : text;
}

/**
 * A union's failure says only that no branch fitted. When a branch got further (a list whose
 * item is wrong), its own issues say what to fix, so those are reported instead.
 */
function flatten(issues: z.core.$ZodIssue[]): z.core.$ZodIssue[] {
  return issues.flatMap((issue) => {
    if (issue.code !== 'invalid_union') return [issue];
    const deeper = issue.errors.flat().filter((inner) => inner.path.length > 0);
    if (deeper.length === 0) return [issue];
    return flatten(deeper).map((inner) => ({ ...inner, path: [...issue.path, ...inner.path] }));
  });
}
