import type { IRouter, Request, Response } from 'express';
import { z } from 'zod';
import { ApiError, batchWarning, type ErrorType } from '@tserve/contract';
import type { ServedModel } from '../serving/served-models.js';
import { BodyTooLarge, errorHandler, type ErrorFormat } from '../http/http-errors.js';
import { httpCaller, jsonBody, type Caller, type ProtocolParts } from '../serving/route-call.js';
import type { InferenceResult } from '../serving/inference.js';
import { shorten } from '../serving/embedding-dimensions.js';
import {
  EmptyInput,
  parse,
  embedRequest,
  info,
  predictRequest,
  rerankRequest,
  tokenizeRequest,
  type ErrorBody,
  type rankedText,
} from './tei-schemas.js';

/**
 * Hugging Face text-embeddings-inference's API: `/embed`, `/predict`, `/rerank`, `/tokenize`,
 * `/info`. TEI serves one model; here each route picks the served model for its kind (an embedding
 * model, a classifier, a reranker: a one-label classifier), or the one named by a `model` field
 * or an `x-model` header when several fit.
 */

const TEI_TYPES: Partial<Record<ErrorType, string>> = {
  validation: 'Validation',
  payload_too_large: 'Validation',
  overloaded: 'Overloaded',
  rate_limited: 'Overloaded',
  unavailable: 'Unhealthy',
  inference: 'Backend',
  timeout: 'Backend',
  internal: 'Backend',
};
/**
 * TEI (1.9+) answers input errors, too-large batches included, with 422, and overload with 429. A
 * body over its payload limit is refused by its HTTP layer (axum) with 413: so is one over MAX_BODY_BYTES.
 */
const TEI_STATUS: Partial<Record<ErrorType, number>> = {
  validation: 422,
  payload_too_large: 422,
  overloaded: 429,
  inference: 424,
};

/** TEI's error body: `{"error", "error_type"}`, with TEI's type names and statuses. */
const teiErrors: ErrorFormat = (error) =>
  error instanceof EmptyInput
    ? { status: 400, body: { error: error.message, error_type: 'Empty' } satisfies ErrorBody }
    : {
        status: error instanceof BodyTooLarge ? 413 : (TEI_STATUS[error.type] ?? error.status),
        body: { error: error.message, error_type: TEI_TYPES[error.type] ?? error.type } satisfies ErrorBody,
      };

interface TokenOffsets {
  start: number | null;
  stop: number | null;
}

function toByteOffsets<T extends TokenOffsets>(text: string, tokens: T[]): T[] {
  const chars = Array.from(text);
  const bytesBefore = new Array<number>(chars.length + 1);
  bytesBefore[0] = 0;
  chars.forEach((c, i) => (bytesBefore[i + 1] = bytesBefore[i] + Buffer.byteLength(c)));
  return tokens.map((t) =>
    t.start === null || t.stop === null ? t : { ...t, start: bytesBefore[t.start], stop: bytesBefore[t.stop] },
  );
}

export interface RouteKind {
  what: string;
  fits: (m: ServedModel) => boolean;
}
export const EMBEDDING: RouteKind = { what: 'an embedding model', fits: (m) => m.tasks.includes('feature-extraction') };
export const CLASSIFIER: RouteKind = {
  what: 'a sequence classifier',
  fits: (m) => m.tasks.includes('text-classification'),
};
export const RERANKER: RouteKind = {
  what: 'a reranker (a classifier with one label)',
  fits: (m) => m.tasks.includes('text-classification') && m.labels?.length === 1,
};
export const ANY: RouteKind = { what: 'a model', fits: () => true };

/** TEI's `model_type` for /info. */
function modelType(m: ServedModel): z.infer<typeof info>['model_type'] {
  const id2label = Object.fromEntries((m.labels ?? []).map((label, i) => [String(i), label]));
  const label2id = Object.fromEntries((m.labels ?? []).map((label, i) => [label, i]));
  if (RERANKER.fits(m)) return { reranker: { id2label, label2id } };
  if (CLASSIFIER.fits(m)) return { classifier: { id2label, label2id } };
  return { embedding: { pooling: 'mean' } };
}

/** A TEI request's envelope: how it runs its calls, and the model its `x-model` header (or metadata) names. */
export interface TeiRequest {
  caller: Caller;
  xModel?: string;
}

/** The timing of a request's model call, as TEI's gRPC answers carry it in `metadata`. */
export type Timing = InferenceResult['timing'];

/**
 * TEI's requests over one gateway's parts, whatever protocol brings them: each picks its model,
 * checks its kind, makes its model call, and returns TEI's answer with its call's timing.
 */
export class Tei {
  constructor(private readonly parts: ProtocolParts) {}

  /**
   * The model a request names (body `model`, `x-model`), or the only served one of its kind, or,
   * with none served at all, the only one configured (MODELS): scaled to zero, its kind is known
   * once a worker serves it.
   */
  pick(xModel: string | undefined, kind: RouteKind, named?: string): string {
    const { registry } = this.parts;
    const asked = named ?? xModel;
    if (asked !== undefined) return asked;
    const fitting = registry.served().filter(kind.fits);
    if (fitting.length === 1) return fitting[0].id;
    const configured = registry.configured();
    if (registry.served().length === 0 && configured.length === 1) return configured[0];
    if (fitting.length === 0) {
      const served = registry.served().map((m) => m.id);
      throw new ApiError(
        'unavailable',
        `no served model is ${kind.what}${served.length ? ` (served: ${served.join(', ')})` : ''}`,
        2,
      );
    }
    throw new ApiError(
      'validation',
      `several served models are ${kind.what}: ${fitting.map((m) => m.id).join(', ')}; name one with a "model" field or x-model (a header, or gRPC metadata)`,
    );
  }

  /** The model a request's envelope names, or the only fitting one, before its body: for shedding and key permissions. */
  pickBeforeBody(xModel: string | undefined, kind: RouteKind): string | undefined {
    try {
      return this.pick(xModel, kind);
    } catch {
      return undefined;
    }
  }

  /** The model, once a worker serves it (one still to come is waited for, or refused, as a call is), checked to be of the route's kind. */
  async checkKind(caller: Caller, id: string, kind: RouteKind): Promise<void> {
    const served = this.parts.registry.get(id) ?? (await caller.whenServed(id));
    if (!kind.fits(served))
      throw new ApiError('validation', `model ${id} is not ${kind.what}; it serves ${served.tasks.join(', ')}`);
  }

  async embed({ caller, xModel }: TeiRequest, body: z.output<typeof embedRequest>): Promise<[number[][], Timing]> {
    const id = this.pick(xModel, EMBEDDING, body.model);
    await this.checkKind(caller, id, EMBEDDING);
    const result = await caller.run({
      model: id,
      task: 'feature-extraction',
      inputs: typeof body.inputs === 'string' ? [body.inputs] : body.inputs,
      parameters: {
        normalize: body.normalize,
        truncation: body.truncate,
        truncation_direction: body.truncation_direction,
      },
    });
    const vectors = result.outputs as number[][];
    const dimensions = body.dimensions ?? undefined;
    if (dimensions !== undefined && dimensions > vectors[0].length)
      throw new ApiError('validation', `dimensions must be at most ${vectors[0].length}`);
    return [vectors.map((v) => shorten(v, dimensions, body.normalize)), result.timing];
  }

  /** One input's scores, or a list's (a string or a two-string list is one input; any other list is a batch). */
  async predict({ caller, xModel }: TeiRequest, body: z.output<typeof predictRequest>): Promise<[unknown, Timing]> {
    const id = this.pick(xModel, CLASSIFIER, body.model);
    await this.checkKind(caller, id, CLASSIFIER);
    const single =
      typeof body.inputs === 'string' || (body.inputs.length === 2 && body.inputs.every((x) => typeof x === 'string'));
    const sequences = (single ? [body.inputs] : body.inputs) as Array<string | [string, string]>;
    const inputs = sequences.map((s) => (typeof s === 'string' ? s : { text: s[0], text_pair: s[1] }));
    const result = await caller.run({
      model: id,
      task: 'text-classification',
      inputs,
      parameters: {
        top_k: null,
        truncation: body.truncate,
        truncation_direction: body.truncation_direction,
        ...(body.raw_scores ? { function_to_apply: 'none' } : {}),
      },
    });
    return [single ? result.outputs[0] : result.outputs, result.timing];
  }

  async rerank(
    { caller, xModel }: TeiRequest,
    body: z.output<typeof rerankRequest>,
  ): Promise<[z.infer<typeof rankedText>[], Timing]> {
    const id = this.pick(xModel, RERANKER, body.model);
    await this.checkKind(caller, id, RERANKER);
    // Each (query, text) pair is one sequence of the worker's batches.
    const result = await caller.run({
      model: id,
      task: 'text-classification',
      inputs: body.texts.map((t) => ({ text: body.query, text_pair: t })),
      parameters: {
        truncation: body.truncate,
        truncation_direction: body.truncation_direction,
        function_to_apply: body.raw_scores ? 'none' : 'sigmoid',
      },
    });
    const ranked = (result.outputs as Array<Array<{ score: number }>>)
      .map((scores, index) => ({
        index,
        score: scores[0].score,
        ...(body.return_text ? { text: body.texts[index] } : {}),
      }))
      .sort((a, b) => b.score - a.score);
    return [ranked, result.timing];
  }

  async tokenize({ caller, xModel }: TeiRequest, body: z.output<typeof tokenizeRequest>): Promise<TokenOffsets[][]> {
    const id = this.pick(xModel, ANY, body.model);
    const texts = typeof body.inputs === 'string' ? [body.inputs] : body.inputs;
    const result = await caller.run({
      model: id,
      task: 'tokenize',
      inputs: texts,
      parameters: { add_special_tokens: body.add_special_tokens },
    });
    // Workers give code-point offsets; TEI's are UTF-8 byte offsets.
    return (result.outputs as TokenOffsets[][]).map((tokens, i) => toByteOffsets(texts[i], tokens));
  }

  info(xModel: string | undefined, named?: string): z.infer<typeof info> {
    const { config, registry } = this.parts;
    const id = this.pick(xModel, ANY, named);
    const m = registry.get(id);
    if (!m) throw new ApiError('not_found', `model ${id} is not served`);
    const smallest = (values: Array<number | undefined>) =>
      Math.min(...values.filter((v): v is number => v !== undefined));
    return {
      model_id: m.id,
      // TEI's model_sha is the hub revision (commit) served; null for a local folder, or while workers disagree.
      model_sha: m.weights.revision ?? null,
      model_weights_sha256: m.weights.sha256 ?? null,
      served_model_name: m.id,
      model_dtype: [...new Set(m.workers.map((w) => w.dtype))].join(','),
      ...batchWarning(m.workers),
      model_type: modelType(m),
      task: m.task,
      tasks: m.tasks,
      max_concurrent_requests: config.MAX_QUEUE_DEPTH,
      max_input_length: m.maxLength,
      max_batch_tokens: smallest(m.workers.map((w) => w.batchMaxTokens)),
      max_batch_requests: smallest(m.workers.map((w) => w.batchMaxSize)),
      max_client_batch_size: config.MAX_INPUTS_PER_REQUEST,
      auto_truncate: false,
      tokenization_workers: m.workers.length,
      version: '0.1.0',
    };
  }
}

export function teiRoutes(router: IRouter, parts: ProtocolParts): void {
  const json = jsonBody(parts.config);
  const tei = new Tei(parts);
  const admit = (kind: RouteKind) => parts.admission.beforeBody((req) => tei.pickBeforeBody(req.get('x-model'), kind));
  const request = (req: Request, res: Response): TeiRequest => ({
    caller: httpCaller(parts.service, req, res),
    xModel: req.get('x-model'),
  });
  router.post('/embed', admit(EMBEDDING), json, async (req, res) => {
    res.json((await tei.embed(request(req, res), parse(embedRequest, req.body)))[0]);
  });
  router.post('/predict', admit(CLASSIFIER), json, async (req, res) => {
    res.json((await tei.predict(request(req, res), parse(predictRequest, req.body)))[0]);
  });
  router.post('/rerank', admit(RERANKER), json, async (req, res) => {
    res.json((await tei.rerank(request(req, res), parse(rerankRequest, req.body)))[0]);
  });
  router.post('/tokenize', admit(ANY), json, async (req, res) => {
    res.json(await tei.tokenize(request(req, res), parse(tokenizeRequest, req.body)));
  });
  router.get('/info', (req, res) => {
    res.json(tei.info(req.get('x-model'), typeof req.query.model === 'string' ? req.query.model : undefined));
  });
  for (const path of ['/embed', '/predict', '/rerank', '/tokenize', '/info'])
    router.use(path, errorHandler(parts.logger, teiErrors));
}
