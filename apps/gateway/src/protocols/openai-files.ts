import { StringDecoder } from 'node:string_decoder';
import type { Readable } from 'node:stream';
import type { IRouter, Request, Response } from 'express';
import busboy from 'busboy';
import { ApiError } from '@tserve/contract';
import { errorHandler } from '../http/http-errors.js';
import { openAiErrors } from './openai.js';
import { admittedOf, type Admission } from '../admission/admission.js';
import type { FileObject, FileStore } from '../offline/files.js';
import type { Logger } from 'pino';

/**
 * OpenAI's Files API, for the Batch API's files (`purpose=batch` in; `batch_output` out):
 * `POST /v1/files` (multipart), `GET /v1/files`, `GET /v1/files/{id}`, `GET /v1/files/{id}/content`,
 * `DELETE /v1/files/{id}`. An upload streams into the store a window of lines at a time: the
 * gateway never holds a whole file, and its request-body budget is left to the inference routes.
 */

/** OpenAI's error body for files and batches: its codes for a missing file, a file too large, a full store. */
export const offlineErrors = openAiErrors({
  not_found: { type: 'invalid_request_error', code: null },
  payload_too_large: { type: 'invalid_request_error', code: 'file_too_large' },
  insufficient_storage: { type: 'invalid_request_error', code: 'storage_limit_exceeded' },
});

/** Whose files and batches a request may see: its key's, or everyone's ('-') with keys off. */
export const owner = (res: Response) => admittedOf(res).key?.id ?? '-';

/** `limit` and `after` of a list, as OpenAI's cursor pages send them. */
export function pageQuery(req: Request): { after?: string; limit: number } {
  const limit = req.query.limit === undefined ? 20 : Number(req.query.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 10_000)
    throw new ApiError('validation', 'limit must be an integer from 1 to 10000');
  const after = typeof req.query.after === 'string' ? req.query.after : undefined;
  return { limit, ...(after ? { after } : {}) };
}

/** A list as OpenAI's cursor pages read it. */
export function listBody<T extends { id: string }>(page: { data: T[]; has_more: boolean }) {
  return {
    object: 'list' as const,
    data: page.data,
    first_id: page.data[0]?.id ?? null,
    last_id: page.data.at(-1)?.id ?? null,
    has_more: page.has_more,
  };
}

const withoutCr = (line: string) => (line.endsWith('\r') ? line.slice(0, -1) : line);

/**
 * The lines of an uploaded file as they arrive (a line may end in CRLF). Iterating the stream
 * itself, not readline: a stream destroyed part way (its client went away) ends the iteration with
 * an error, and nothing of the file is kept.
 */
export async function* linesOf(stream: Readable & { truncated?: boolean }, maxBytes: number): AsyncGenerator<string> {
  const decoder = new StringDecoder('utf8');
  let carry = '';
  // Not destroyed when the store stops reading (a refused file): the rest of it is drained, so that
  // the form is read to its end and answered.
  for await (const chunk of stream.iterator({ destroyOnReturn: false })) {
    const text = decoder.write(chunk as Buffer);
    // Only a chunk that ends a line is split: a long line grows by appending, never by splitting
    // all it holds again at each chunk, which a 200 MB line would make quadratic.
    const end = text.lastIndexOf('\n');
    if (end === -1) {
      carry += text;
      continue;
    }
    const lines = (carry + text.slice(0, end)).split('\n');
    carry = text.slice(end + 1);
    for (const line of lines) yield withoutCr(line);
  }
  carry += decoder.end();
  if (carry) yield withoutCr(carry);
  if (stream.truncated)
    throw new ApiError('payload_too_large', `the file is larger than ${maxBytes / 1e6} MB (FILES_MAX_MB)`);
}

/** Reads a multipart upload's `file` into the store, and its `purpose`; the file, once both are in. */
function upload(req: Request, files: FileStore, owner: string): Promise<FileObject> {
  const { maxBytes } = files.limits;
  return new Promise((resolve, reject) => {
    let stored: Promise<FileObject> | undefined;
    let file: Readable | undefined;
    let purpose: string | undefined;
    let unknown: string | undefined;
    const parser = busboy({ headers: req.headers, limits: { files: 1, fields: 8, fileSize: maxBytes + 1 } });
    parser.on('field', (name, value) => {
      if (name === 'purpose') purpose = value;
      else unknown ??= name;
    });
    parser.on('file', (name, stream, info) => {
      if (name !== 'file') {
        unknown ??= name;
        stream.resume();
        return;
      }
      file = stream;
      stored = files.create(owner, info.filename || 'upload.jsonl', 'batch', linesOf(stream, maxBytes));
      // Read on, to the end of the request, even once the store refused the file.
      stored.catch(() => stream.resume());
    });
    // A body cut short, by the client or malformed, may still have made a file of its first part:
    // it is not the client's file. The file's own stream is ended with the body.
    const fail = (error: ApiError) => {
      file?.destroy(error);
      stored?.then((made) => files.delete(owner, made.id)).catch(() => undefined);
      reject(error);
    };
    parser.on('error', (err) => fail(new ApiError('validation', `malformed multipart body: ${String(err)}`)));
    req.once('close', () => {
      if (!req.complete) fail(new ApiError('validation', 'the upload was cut short'));
    });
    parser.on('close', () => {
      const check = async (): Promise<FileObject> => {
        if (!stored) throw new ApiError('validation', 'the upload has no "file" part');
        const made = await stored;
        const problem =
          purpose !== 'batch'
            ? `purpose must be "batch" (files here are for the Batch API), not ${JSON.stringify(purpose ?? null)}`
            : unknown !== undefined
              ? `unknown field ${JSON.stringify(unknown)}: this server takes "file" and "purpose"`
              : undefined;
        if (problem) {
          await files.delete(owner, made.id);
          throw new ApiError('validation', problem);
        }
        return made;
      };
      check().then(resolve, reject);
    });
    req.pipe(parser);
  });
}

export function openAiFileRoutes(
  router: IRouter,
  { files, admission, logger }: { files: FileStore; admission: Admission; logger: Logger },
): void {
  const who = admission.identify();
  router.post('/v1/files', who, async (req, res) => {
    if (!req.is('multipart/form-data'))
      throw new ApiError('validation', 'send the file as multipart/form-data, with the fields "file" and "purpose"');
    try {
      res.json(await upload(req, files, owner(res)));
    } catch (err) {
      // What is left of a refused upload is not read: the connection closes after the answer.
      res.setHeader('Connection', 'close');
      throw err;
    }
  });

  router.get('/v1/files', who, async (req, res) => {
    const order = req.query.order ?? 'desc';
    if (order !== 'asc' && order !== 'desc') throw new ApiError('validation', 'order must be "asc" or "desc"');
    const purpose = typeof req.query.purpose === 'string' ? req.query.purpose : undefined;
    const page = await files.list(owner(res), { ...pageQuery(req), ascending: order === 'asc', purpose });
    res.json(listBody(page));
  });

  const fileOf = async (req: Request, res: Response) => {
    const stored = await files.get(owner(res), String(req.params.id));
    if (!stored) throw new ApiError('not_found', `no file ${String(req.params.id).slice(0, 100)}`);
    return stored.file;
  };
  router.get('/v1/files/:id', who, async (req, res) => {
    res.json(await fileOf(req, res));
  });

  router.get('/v1/files/:id/content', who, async (req, res) => {
    const file = await fileOf(req, res);
    res.setHeader('content-type', 'application/octet-stream');
    res.setHeader('content-disposition', `attachment; filename="${file.filename.replace(/["\\\r\n]/g, '_')}"`);
    for await (const lines of files.content(file.id)) {
      if (res.destroyed) return;
      if (!res.write(`${lines.join('\n')}\n`))
        await new Promise((resolve) => {
          res.once('drain', resolve);
          res.once('close', resolve);
        });
    }
    res.end();
  });

  router.delete('/v1/files/:id', who, async (req, res) => {
    const id = String(req.params.id);
    if (!(await files.delete(owner(res), id))) throw new ApiError('not_found', `no file ${id.slice(0, 100)}`);
    res.json({ id, object: 'file', deleted: true });
  });

  router.use('/v1/files', errorHandler(logger, offlineErrors));
}
