/**
 * A batch's lines, in and out, as OpenAI's Batch API writes them: a request line
 * `{"custom_id", "method": "POST", "url", "body"}`, and an answer line
 * `{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}`. Pure: the
 * runner reads lines, sends them and writes answers with these.
 */

/** The routes a batch may send its lines to: each is answered as that route answers it alone. */
const ENDPOINTS =
  /^\/(v1\/embeddings|v1\/rerank|v2\/rerank|rerank|embed|embed_all|embed_sparse|predict|models\/[^?#]+)?$/;

export const ENDPOINTS_ALLOWED =
  '/v1/embeddings, /models/<model id>, /, /rerank, /v1/rerank, /v2/rerank, /embed, /embed_all, /embed_sparse, /predict';

export function endpointAllowed(endpoint: string): boolean {
  return ENDPOINTS.test(endpoint);
}

export interface RequestLine {
  custom_id: string;
  url: string;
  /** The body as the route will read it. */
  body: string;
  /** The model the line calls: named by its endpoint (`/models/<id>`) or its body's `model`. */
  model?: string;
}

/** Why a line was not sent: its custom_id where it had one, and what is wrong with it. */
export interface LineRefusal {
  custom_id: string | null;
  code: 'invalid_json' | 'invalid_line' | 'invalid_url';
  message: string;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A line of the input file, checked against the batch's endpoint. */
export function parseLine(text: string, endpoint: string): RequestLine | LineRefusal {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return {
      custom_id: null,
      code: 'invalid_json',
      message: `the line is not JSON: ${err instanceof Error ? err.message : String(err)}`,
    };
  }
  if (!isObject(raw)) return { custom_id: null, code: 'invalid_line', message: 'the line is not a JSON object' };
  const customId = typeof raw.custom_id === 'string' && raw.custom_id !== '' ? raw.custom_id : null;
  const refuse = (code: LineRefusal['code'], message: string): LineRefusal => ({ custom_id: customId, code, message });
  if (customId === null) return refuse('invalid_line', 'custom_id must be a non-empty string');
  if (raw.method !== 'POST') return refuse('invalid_line', 'method must be "POST"');
  if (typeof raw.url !== 'string') return refuse('invalid_line', 'url must be a string');
  if (raw.url !== endpoint)
    return refuse('invalid_url', `url ${raw.url.slice(0, 200)} is not the batch's endpoint ${endpoint}`);
  if (!isObject(raw.body)) return refuse('invalid_line', 'body must be a JSON object');
  const model = raw.url.startsWith('/models/') ? raw.url.slice('/models/'.length) : raw.body.model;
  return {
    custom_id: customId,
    url: raw.url,
    body: JSON.stringify(raw.body),
    ...(typeof model === 'string' && model !== '' ? { model } : {}),
  };
}

export function isRefusal(line: RequestLine | LineRefusal): line is LineRefusal {
  return 'code' in line;
}

/** A route's answer to a line. `body` is its bytes, written into the line as they came when they are JSON. */
export interface RouteAnswer {
  status: number;
  requestId: string | null;
  body: Buffer;
  json: boolean;
}

/** A line's id in the output (OpenAI's `batch_req_…`): one a line, whichever run of its batch answers it. */
export function lineId(batchId: string, index: number): string {
  return `${lineIdPrefix(batchId)}${index}`;
}

function lineIdPrefix(batchId: string): string {
  return `batch_req_${batchId.replace(/^batch-/, '')}_`;
}

/**
 * The answer line of a line a route answered (`batch_req_<id>`, as OpenAI names them), as bytes: a
 * JSON body goes in as it came, never decoded to text and encoded again on its way to Redis.
 */
export function answerLine(id: string, customId: string | null, answer: RouteAnswer): Buffer {
  const body = answer.json ? answer.body : Buffer.from(JSON.stringify(answer.body.toString('utf8')));
  return Buffer.concat([
    Buffer.from(
      `{"id":${JSON.stringify(id)},"custom_id":${JSON.stringify(customId)},` +
        `"response":{"status_code":${answer.status},"request_id":${JSON.stringify(answer.requestId)},"body":`,
    ),
    body,
    ANSWER_END,
  ]);
}

const ANSWER_END = Buffer.from('},"error":null}');

/** The answer line of a line no route answered: refused, or left unrun when its batch expired. */
export function errorLine(id: string, customId: string | null, code: string, message: string): string {
  return JSON.stringify({ id, custom_id: customId, response: null, error: { code, message } });
}

/**
 * The error line of a line its batch left unrun as it expired, as the text before and after the
 * line's index: what Redis joins around each index as it ends the batch (BatchStore.move).
 */
export function expiredLine(batchId: string): { head: string; tail: string } {
  const id = lineIdPrefix(batchId);
  const line = errorLine(`${id}#`, null, 'batch_expired', 'the batch expired before this line ran');
  const at = line.indexOf(`${id}#`) + id.length;
  return { head: line.slice(0, at), tail: line.slice(at + 1) };
}

/** Whether a route's answer is the line's (2xx: the output file; else the error file) or asks to be sent again. */
export function answerKind(status: number): 'ok' | 'failed' | 'retry' {
  if (status >= 200 && status < 300) return 'ok';
  // Shed, over the key's quota, timed out in the queue, or the model not yet loaded: the line waits
  // and goes again, behind interactive traffic, until its batch expires.
  if (status === 429 || status === 503 || status === 504) return 'retry';
  return 'failed';
}

/** How a duration like OpenAI's `24h` reads, in seconds: `<n>h`, `<n>m` or `<n>s`. */
export function windowSeconds(window: string): number | undefined {
  const match = /^([1-9]\d{0,6})([hms])$/.exec(window);
  if (!match) return undefined;
  return Number(match[1]) * { h: 3600, m: 60, s: 1 }[match[2] as 'h' | 'm' | 's'];
}
