import type { IRouter, Request, Response } from 'express';
import { z } from 'zod';
import { ApiError, parseLenient, type Operation } from '@tserve/contract';
import { errorHandler } from '../http/http-errors.js';
import {
  answerHeaders,
  httpEnvelope,
  inferenceRequest,
  type CallBody,
  type Envelope,
  type ProtocolParts,
} from '../serving/envelope.js';
import { jsonBody } from '../http/request-body.js';
import { noteIgnored } from '../http/ignored-fields.js';
import { requestIdOf } from '../http/request-id.js';
import { jsonList, sendJson } from '../http/json-bytes.js';
import type { InferenceResult, RequestModel } from '../serving/inference.js';
import { shorten } from '../serving/embedding-dimensions.js';
import { compactVector, type EmbeddingType } from '../serving/compact-vectors.js';
import {
  ANY,
  checkKind,
  CLASSIFIER,
  EMBEDDING,
  ModelChoice,
  RERANKER,
  SPARSE,
  type RouteKind,
} from '../serving/model-choice.js';
import { teiInfo } from './tei-info.js';
import { rankingCall, ranksOf, type Rank } from '../serving/ranking.js';
import {
  parse,
  decodeRequest,
  embedRequest,
  embedAllRequest,
  embedSparseRequest,
  info,
  predictRequest,
  rerankRequest,
  similarityRequest,
  SIMILARITY_TEXTS,
  teiErrors,
  tokenizeRequest,
  vertexRequest,
  type vertexResponse,
  type rankedDocuments,
  type rankedText,
} from './tei-schemas.js';

/**
 * Hugging Face text-embeddings-inference's API (TEI_PATHS). TEI serves one model; here each route
 * picks the served model for its kind (an embedding model, a classifier, a reranker: a one-label
 * classifier), or the one named by a `model` field or an `x-model` header when several fit.
 */

const TEI_PATHS = [
  '/embed',
  '/embed_all',
  '/embed_sparse',
  '/predict',
  '/rerank',
  '/similarity',
  '/tokenize',
  '/decode',
  '/info',
];

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

/**
 * A TEI request besides its body: its envelope, the model its `x-model` header (or metadata) names,
 * and the model itself where it is known already (a Vertex instance's, chosen by its kind).
 */
export interface TeiRequest {
  envelope: Envelope;
  xModel?: string;
  model?: RequestModel;
}

/**
 * An embedding route's answer, one vector per input: each one's JSON as its worker wrote it, where
 * nothing here reshaped them (`json`, written to an HTTP client unparsed), and the vectors
 * themselves, parsed when asked for (gRPC's messages).
 */
export interface Vectors<T> {
  values: () => T[];
  json?: Buffer[];
}

/** A model call's outputs as a route's vectors, unchanged. */
const vectorsOf = <T>(result: InferenceResult): Vectors<T> => ({
  values: () => result.outputs as T[],
  json: result.outputsJson,
});

/** A route's vectors in an HTTP answer. */
function sendVectors<T>(res: Response, vectors: Vectors<T>): void {
  if (vectors.json) sendJson(res, jsonList(vectors.json));
  else res.json(vectors.values());
}

/** /embed's vectors in the type its body asks for (`embedding_type`, not TEI's): floats, or a compact type. */
const inType = (vectors: number[][], type: EmbeddingType) => vectors.map((v) => compactVector(v, type));

/** The cosine of two vectors as the model gave them: TEI's `/similarity` compares them unnormalised. */
function cosine(a: number[], b: number[]): number {
  let dot = 0;
  let aa = 0;
  let bb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return dot / Math.sqrt(aa * bb);
}

/** The timing of a request's model call, as TEI's gRPC answers carry it in `metadata`. */
export type Timing = InferenceResult['timing'];

/** A rerank's outcome, before either answer's shape: the best `top_n` of the texts, by score. */
export interface Ranked {
  model: string;
  ranks: Rank[];
  texts: string[];
  /** The model call's result: its timing, the tokens the model read. */
  result: InferenceResult;
}

/** TEI's answer: `{index, score}` each, and the text where asked for (`return_text`, or `return_documents`). */
export function teiRanks(body: z.output<typeof rerankRequest>, ranked: Ranked): z.infer<typeof rankedText>[] {
  const withText = body.return_text || body.return_documents === true;
  return ranked.ranks.map((r) => (withText ? { ...r, text: ranked.texts[r.index] } : r));
}

/** The answer to a body with `documents`, in the shape Infinity, vLLM and Jina answer: `results`, with usage. */
function documentRanks(
  body: z.output<typeof rerankRequest>,
  ranked: Ranked,
  id: string,
): z.infer<typeof rankedDocuments> {
  const documents = body.documents ?? [];
  return {
    id,
    object: 'rerank',
    model: ranked.model,
    results: ranked.ranks.map(({ index, score }) => {
      const d = documents[index];
      const document = body.return_documents ? { document: typeof d === 'string' ? { text: d } : d } : {};
      return { index, relevance_score: score, ...document };
    }),
    usage: { prompt_tokens: ranked.result.tokens, total_tokens: ranked.result.tokens },
    created: Math.floor(Date.now() / 1000),
  };
}

/**
 * TEI's requests over one gateway's parts, whatever protocol brings them: each picks its model,
 * checks its kind, makes its model call, and returns TEI's answer with its call's timing.
 */
export class Tei {
  readonly choice: ModelChoice;

  constructor(private readonly parts: ProtocolParts) {
    this.choice = new ModelChoice(parts.registry);
  }

  /**
   * Runs a route's call on the model the request names (or the only one of `kind`), checked to be
   * of that kind: the request's one question of the registry, unless its model is known already.
   */
  private async run(tei: TeiRequest, kind: RouteKind, named: string | undefined, call: Omit<CallBody, 'model'>) {
    const { service } = this.parts;
    const id = tei.model?.served.id ?? this.choice.pick(tei.xModel, kind, named);
    const request = inferenceRequest(tei.envelope, { ...call, model: id });
    return service.infer(request, checkKind(tei.model ?? (await service.modelFor(request)), kind));
  }

  /** Runs an embedding route's call: the model of `kind`, each input one text, cut and prompted as the body says. */
  private runTexts(
    request: TeiRequest,
    kind: RouteKind,
    task: Operation,
    body: z.output<typeof embedAllRequest>,
    parameters: Record<string, unknown> = {},
  ): Promise<InferenceResult> {
    return this.run(request, kind, body.model, {
      task,
      inputs: typeof body.inputs === 'string' ? [body.inputs] : body.inputs,
      parameters: {
        truncation: body.truncate,
        truncation_direction: body.truncation_direction,
        prompt_name: body.prompt_name,
        ...parameters,
      },
    });
  }

  async embed(request: TeiRequest, body: z.output<typeof embedRequest>): Promise<[Vectors<number[]>, InferenceResult]> {
    const result = await this.runTexts(request, EMBEDDING, 'feature-extraction', body, { normalize: body.normalize });
    const dimensions = body.dimensions ?? undefined;
    if (dimensions === undefined) return [vectorsOf(result), result];
    const vectors = result.outputs as number[][];
    if (dimensions > vectors[0].length)
      throw new ApiError('validation', `dimensions must be at most ${vectors[0].length}`);
    const shortened = vectors.map((v) => shorten(v, dimensions, body.normalize));
    return [{ values: () => shortened }, result];
  }

  /** Each input's token vectors, unpooled and unnormalised: what /embed pools. */
  async embedAll(
    request: TeiRequest,
    body: z.output<typeof embedAllRequest>,
  ): Promise<[Vectors<number[][]>, InferenceResult]> {
    const result = await this.runTexts(request, EMBEDDING, 'feature-extraction', body, {
      pooling: 'none',
      normalize: false,
    });
    return [vectorsOf(result), result];
  }

  /** Each input's sparse vector: its non-zero vocabulary entries. */
  async embedSparse(
    request: TeiRequest,
    body: z.output<typeof embedSparseRequest>,
  ): Promise<[Vectors<Array<{ index: number; value: number }>>, InferenceResult]> {
    const result = await this.runTexts(request, SPARSE, 'embed-sparse', body);
    return [vectorsOf(result), result];
  }

  /** Each sentence's cosine similarity to the source sentence, of their embeddings unnormalised, as TEI computes it. */
  async similarity(
    request: TeiRequest,
    body: z.output<typeof similarityRequest>,
  ): Promise<[number[], InferenceResult]> {
    const { source_sentence, sentences } = body.inputs;
    const parameters = body.parameters ?? { truncate: false, prompt_name: undefined };
    const texts = { ...parameters, inputs: [source_sentence, ...sentences], model: body.model };
    const result = await this.runTexts(request, EMBEDDING, 'feature-extraction', texts, { normalize: false });
    const [source, ...others] = result.outputs as number[][];
    return [others.map((v) => cosine(source, v)), result];
  }

  /** One input's scores, or a list's (a string or a two-string list is one input; any other list is a batch). */
  async predict(request: TeiRequest, body: z.output<typeof predictRequest>): Promise<[unknown, InferenceResult]> {
    const single =
      typeof body.inputs === 'string' || (body.inputs.length === 2 && body.inputs.every((x) => typeof x === 'string'));
    const sequences = (single ? [body.inputs] : body.inputs) as Array<string | [string, string]>;
    const inputs = sequences.map((s) => (typeof s === 'string' ? s : { text: s[0], text_pair: s[1] }));
    const result = await this.run(request, CLASSIFIER, body.model, {
      task: 'text-classification',
      inputs,
      parameters: {
        top_k: null,
        truncation: body.truncate,
        truncation_direction: body.truncation_direction,
        ...(body.raw_scores ? { function_to_apply: 'none' } : {}),
      },
    });
    return [single ? result.outputs[0] : result.outputs, result];
  }

  /** The texts, or documents, ranked against the query, best first: the `top_n` best where it is set. */
  async rerank(request: TeiRequest, body: z.output<typeof rerankRequest>): Promise<Ranked> {
    const id = this.choice.pick(request.xModel, RERANKER, body.model);
    const texts = body.texts ?? (body.documents ?? []).map((d) => (typeof d === 'string' ? d : d.text));
    const call = rankingCall(id, body.query, texts, {
      // TEI cuts nothing unless asked; the servers whose body has documents cut each pair to fit.
      truncate: body.truncate ?? body.documents !== undefined,
      direction: body.truncation_direction,
      rawScores: body.raw_scores,
    });
    const result = await this.run(request, RERANKER, id, call);
    return { model: id, ranks: ranksOf(result).slice(0, body.top_n ?? undefined), texts, result };
  }

  async tokenize(
    request: TeiRequest,
    body: z.output<typeof tokenizeRequest>,
  ): Promise<[TokenOffsets[][], InferenceResult]> {
    const texts = typeof body.inputs === 'string' ? [body.inputs] : body.inputs;
    const result = await this.run(request, ANY, body.model, {
      task: 'tokenize',
      inputs: texts,
      parameters: { add_special_tokens: body.add_special_tokens, prompt_name: body.prompt_name },
    });
    // Workers give code-point offsets; TEI's are UTF-8 byte offsets.
    return [(result.outputs as TokenOffsets[][]).map((tokens, i) => toByteOffsets(texts[i], tokens)), result];
  }

  /** The text of each sequence of ids: one sequence's ids, or a list of sequences. */
  async decode(request: TeiRequest, body: z.output<typeof decodeRequest>): Promise<[string[], InferenceResult]> {
    const single = body.ids.every((x) => typeof x === 'number');
    const sequences = (single ? [body.ids] : body.ids) as number[][];
    const result = await this.run(request, ANY, body.model, {
      task: 'decode',
      inputs: sequences.map((ids) => ({ ids })),
      parameters: { skip_special_tokens: body.skip_special_tokens },
    });
    return [result.outputs as string[], result];
  }

  /**
   * One instance of a Vertex AI request, answered as TEI's /vertex answers it: a rerank body (query
   * and texts) is ranked; any other is the body of the model's own route: /predict for a classifier,
   * /embed_sparse for a sparse model, /embed for an embedding model.
   */
  async vertexPrediction(
    request: TeiRequest,
    instance: unknown,
    ignored: (fields: string[]) => void,
  ): Promise<[unknown, InferenceResult]> {
    const asRerank = parseLenient(rerankRequest, instance);
    if (asRerank.success && asRerank.data.texts) {
      ignored(asRerank.ignored);
      const ranked = await this.rerank(request, asRerank.data);
      return [teiRanks(asRerank.data, ranked), ranked.result];
    }
    const named =
      typeof instance === 'object' && instance !== null ? (instance as { model?: unknown }).model : undefined;
    const id = this.choice.pick(request.xModel, ANY, typeof named === 'string' ? named : undefined);
    // The model's kind tells the route: asked of the registry here, and handed on.
    const model = await this.parts.service.modelFor(inferenceRequest(request.envelope, { model: id, inputs: [] }));
    const known = { ...request, model };
    if (CLASSIFIER.fits(model.served)) return this.predict(known, parse(predictRequest, instance, ignored));
    if (SPARSE.fits(model.served)) {
      const [vectors, result] = await this.embedSparse(known, parse(embedSparseRequest, instance, ignored));
      return [vectors.values(), result];
    }
    const body = parse(embedRequest, instance, ignored);
    const [vectors, result] = await this.embed(known, body);
    return [inType(vectors.values(), body.embedding_type), result];
  }

  /** The served model a request names (or the only one), as TEI describes itself. */
  info(xModel: string | undefined, named?: string): z.infer<typeof info> {
    return teiInfo(this.parts, this.choice.pick(xModel, ANY, named));
  }
}

export function teiRoutes(router: IRouter, parts: ProtocolParts): void {
  const json = jsonBody(parts.config);
  const tei = new Tei(parts);
  const admit = (kind: RouteKind) =>
    parts.admission.beforeBody((req) => tei.choice.pickBeforeBody(req.get('x-model'), kind));
  const teiRequest = (req: Request, res: Response): TeiRequest => ({
    envelope: httpEnvelope(req, res, parts.config.REQUEST_TIMEOUT_MS),
    xModel: req.get('x-model'),
  });
  /** The request's body as its route reads it; unknown fields are left out, and named in the answer. */
  const read = <T extends z.ZodType>(schema: T, req: Request, res: Response, empty?: string[]) =>
    parse(schema, req.body, (fields) => noteIgnored(res, fields), empty);
  router.post('/embed', admit(EMBEDDING), json, async (req, res) => {
    const body = read(embedRequest, req, res);
    const request = teiRequest(req, res);
    const [vectors, result] = await tei.embed(request, body);
    answerHeaders(res, request.envelope, result);
    if (body.embedding_type === 'float') sendVectors(res, vectors);
    else res.json(inType(vectors.values(), body.embedding_type));
  });
  router.post('/embed_sparse', admit(SPARSE), json, async (req, res) => {
    const request = teiRequest(req, res);
    const [vectors, result] = await tei.embedSparse(request, read(embedSparseRequest, req, res));
    answerHeaders(res, request.envelope, result);
    sendVectors(res, vectors);
  });
  router.post('/embed_all', admit(EMBEDDING), json, async (req, res) => {
    const request = teiRequest(req, res);
    const [vectors, result] = await tei.embedAll(request, read(embedAllRequest, req, res));
    answerHeaders(res, request.envelope, result);
    sendVectors(res, vectors);
  });
  router.post('/predict', admit(CLASSIFIER), json, async (req, res) => {
    const request = teiRequest(req, res);
    const [scores, result] = await tei.predict(request, read(predictRequest, req, res));
    answerHeaders(res, request.envelope, result);
    res.json(scores);
  });
  router.post('/rerank', admit(RERANKER), json, async (req, res) => {
    const body = read(rerankRequest, req, res);
    const request = teiRequest(req, res);
    const ranked = await tei.rerank(request, body);
    answerHeaders(res, request.envelope, ranked.result);
    res.json(body.documents ? documentRanks(body, ranked, requestIdOf(res)) : teiRanks(body, ranked));
  });
  router.post('/similarity', admit(EMBEDDING), json, async (req, res) => {
    const request = teiRequest(req, res);
    const [similarities, result] = await tei.similarity(request, read(similarityRequest, req, res, SIMILARITY_TEXTS));
    answerHeaders(res, request.envelope, result);
    res.json(similarities);
  });
  router.post('/tokenize', admit(ANY), json, async (req, res) => {
    const request = teiRequest(req, res);
    const [tokens, result] = await tei.tokenize(request, read(tokenizeRequest, req, res));
    answerHeaders(res, request.envelope, result);
    res.json(tokens);
  });
  router.post('/decode', admit(ANY), json, async (req, res) => {
    const request = teiRequest(req, res);
    const [texts, result] = await tei.decode(request, read(decodeRequest, req, res));
    answerHeaders(res, request.envelope, result);
    res.json(texts);
  });
  router.get('/info', (req, res) => {
    res.json(tei.info(req.get('x-model'), typeof req.query.model === 'string' ? req.query.model : undefined));
  });
  // Vertex AI's prediction route, as TEI's: where AIP_PREDICT_ROUTE names it, and at /vertex.
  const vertex = [...new Set(['/vertex', ...(parts.config.AIP_PREDICT_ROUTE ? [parts.config.AIP_PREDICT_ROUTE] : [])])];
  for (const path of vertex) {
    router.post(path, admit(ANY), json, async (req, res) => {
      const ignored: string[] = [];
      const { instances } = parse(vertexRequest, req.body, (fields) => ignored.push(...fields));
      // Each instance is a request of its own: as many as one request may hold inputs.
      if (instances.length > parts.config.MAX_INPUTS_PER_REQUEST)
        throw new ApiError(
          'payload_too_large',
          `${instances.length} instances, more than the ${parts.config.MAX_INPUTS_PER_REQUEST} a request may hold (MAX_INPUTS_PER_REQUEST)`,
        );
      const { envelope, xModel } = teiRequest(req, res);
      const answers = await Promise.all(
        instances.map((instance, i) => {
          // Each instance is a request of its own to the model: its own part of the request id.
          const part = { envelope: { ...envelope, id: `${envelope.id}-i${i}` }, xModel };
          const ignore = (fields: string[]) => ignored.push(...fields.map((f) => `instances.${i}.${f}`));
          return tei.vertexPrediction(part, instance, ignore).catch((err) => {
            // Which instance a refusal is about.
            if (err instanceof ApiError && err.type === 'validation') err.message = `instances.${i}: ${err.message}`;
            throw err;
          });
        }),
      );
      for (const [, result] of answers) answerHeaders(res, envelope, result);
      const predictions = answers.map(([prediction]) => prediction);
      noteIgnored(res, ignored);
      res.json({ predictions } satisfies z.infer<typeof vertexResponse>);
    });
  }
  for (const path of [...TEI_PATHS, ...vertex]) router.use(path, errorHandler(parts.logger, teiErrors));
}
