import { randomUUID } from 'node:crypto';
import { ApiError } from '@tserve/contract';
import type { GrpcCall, GrpcService } from '../grpc/grpc-calls.js';
import { admitMetadata } from '../serving/metadata-call.js';
import type { ProtocolParts } from '../serving/envelope.js';
import { ANY, CLASSIFIER, EMBEDDING, RERANKER, SPARSE, type RouteKind } from '../serving/model-choice.js';
import { Tei, teiRanks, type TeiRequest, type Timing } from './tei.js';
import {
  decodeRequest,
  embedAllRequest,
  embedRequest,
  embedSparseRequest,
  parse,
  predictRequest,
  rerankRequest,
  tokenizeRequest,
} from './tei-schemas.js';

/**
 * Text-embeddings-inference's gRPC services (`tei.v1` in packages/contract/proto/tei.proto): the
 * same answers as its HTTP routes (tei.ts), from the same code. A message carries one input where
 * HTTP takes a list; a stream's requests are answered in the order they came, each as a call of
 * its own, which the workers batch with the rest. The model is the only one of the method's kind,
 * or the one the `x-model` metadata names.
 */

type Direction = 'TRUNCATION_DIRECTION_RIGHT' | 'TRUNCATION_DIRECTION_LEFT';
const DIRECTION = { TRUNCATION_DIRECTION_RIGHT: 'right', TRUNCATION_DIRECTION_LEFT: 'left' } as const;

/** The fields every TEI message that runs a model may carry; optional ones are absent when unset. */
interface Message {
  inputs?: string | string[];
  truncate?: boolean;
  truncation_direction?: Direction;
  raw_scores?: boolean;
  normalize?: boolean;
  prompt_name?: string;
  dimensions?: number;
  query?: string;
  texts?: string[];
  text?: string;
  return_text?: boolean;
  add_special_tokens?: boolean;
  ids?: number[];
  skip_special_tokens?: boolean;
}

/** A message's truncation, as the HTTP body says it. */
const truncation = (m: Message) => ({
  truncate: m.truncate ?? false,
  truncation_direction: DIRECTION[m.truncation_direction ?? 'TRUNCATION_DIRECTION_RIGHT'],
});

/** TEI's `metadata`: the call's times (ns) and the characters it took. */
function metadataOf(timing: Timing, chars: number, startedAt: number) {
  return {
    compute_chars: chars,
    compute_tokens: 0,
    total_time_ns: Math.round((performance.now() - startedAt) * 1e6),
    tokenization_time_ns: 0,
    queue_time_ns: Math.round(timing.queue_ms * 1e6),
    inference_time_ns: Math.round(timing.inference_ms * 1e6),
  };
}

const MODEL_TYPE = {
  reranker: 'MODEL_TYPE_RERANKER',
  classifier: 'MODEL_TYPE_CLASSIFIER',
  embedding: 'MODEL_TYPE_EMBEDDING',
} as const;

/** Answers each request of a stream, in the order they came; they run side by side. */
async function inOrder(
  requests: AsyncIterable<unknown>,
  send: (response: object) => void,
  answer: (request: Message) => Promise<object>,
): Promise<void> {
  let sent = Promise.resolve();
  const running: Array<Promise<void>> = [];
  for await (const request of requests) {
    const answered = answer(request as Message);
    // A failure ends the stream with its status once the answers before it are out.
    sent = sent.then(async () => send(await answered));
    running.push(sent);
    answered.catch(() => undefined);
  }
  await Promise.all(running);
}

/** Each TEI method's answer to one message, from the HTTP routes' code. */
class TeiMessages {
  private readonly tei: Tei;

  constructor(private readonly parts: ProtocolParts) {
    this.tei = new Tei(parts);
  }

  /** Runs one message's request, admitted as an HTTP request is. */
  private async admitted<T>(call: GrpcCall, kind: RouteKind, run: (request: TeiRequest) => Promise<T>): Promise<T> {
    const xModel = call.metadata('x-model');
    const requestId = randomUUID();
    const { envelope, release } = await admitMetadata(
      this.parts,
      call,
      this.tei.choice.pickBeforeBody(xModel, kind),
      requestId,
    );
    try {
      return await run({ envelope, xModel });
    } finally {
      release();
    }
  }

  async embed(m: Message, call: GrpcCall) {
    const startedAt = performance.now();
    const body = parse(embedRequest, {
      inputs: m.inputs,
      ...truncation(m),
      normalize: m.normalize ?? true,
      ...(m.prompt_name !== undefined ? { prompt_name: m.prompt_name } : {}),
      ...(m.dimensions !== undefined ? { dimensions: m.dimensions } : {}),
    });
    const [embeddings, { timing }] = await this.admitted(call, EMBEDDING, (request) => this.tei.embed(request, body));
    return { embeddings: embeddings.values()[0], metadata: metadataOf(timing, String(m.inputs).length, startedAt) };
  }

  async embedSparse(m: Message, call: GrpcCall) {
    const startedAt = performance.now();
    const body = parse(embedSparseRequest, { inputs: m.inputs, ...truncation(m), prompt_name: m.prompt_name });
    const [vectors, { timing }] = await this.admitted(call, SPARSE, (request) => this.tei.embedSparse(request, body));
    return { sparse_embeddings: vectors.values()[0], metadata: metadataOf(timing, String(m.inputs).length, startedAt) };
  }

  async embedAll(m: Message, call: GrpcCall) {
    const startedAt = performance.now();
    const body = parse(embedAllRequest, { inputs: m.inputs, ...truncation(m), prompt_name: m.prompt_name });
    const [vectors, { timing }] = await this.admitted(call, EMBEDDING, (request) => this.tei.embedAll(request, body));
    return {
      token_embeddings: vectors.values()[0].map((embeddings) => ({ embeddings })),
      metadata: metadataOf(timing, String(m.inputs).length, startedAt),
    };
  }

  async predict(m: Message, call: GrpcCall, pair: boolean) {
    const startedAt = performance.now();
    const inputs = m.inputs ?? '';
    if (pair && (!Array.isArray(inputs) || inputs.length !== 2))
      throw new ApiError('validation', '`inputs` must be a pair: two strings, a text and its text_pair');
    const body = parse(predictRequest, { inputs, raw_scores: m.raw_scores ?? false, ...truncation(m) });
    const [scores, { timing }] = await this.admitted(call, CLASSIFIER, (request) => this.tei.predict(request, body));
    const chars = ([] as string[]).concat(inputs).join('').length;
    return { predictions: scores as object[], metadata: metadataOf(timing, chars, startedAt) };
  }

  async rerank(m: Message, call: GrpcCall) {
    const startedAt = performance.now();
    const body = parse(rerankRequest, {
      query: m.query,
      texts: m.texts,
      raw_scores: m.raw_scores ?? false,
      return_text: m.return_text ?? false,
      ...truncation(m),
    });
    const ranked = await this.admitted(call, RERANKER, (request) => this.tei.rerank(request, body));
    const chars = body.query.length * ranked.texts.length + ranked.texts.join('').length;
    return { ranks: teiRanks(body, ranked), metadata: metadataOf(ranked.result.timing, chars, startedAt) };
  }

  async tokenize(m: Message, call: GrpcCall) {
    const body = parse(tokenizeRequest, {
      inputs: m.inputs,
      add_special_tokens: m.add_special_tokens ?? true,
      ...(m.prompt_name !== undefined ? { prompt_name: m.prompt_name } : {}),
    });
    const [[tokens]] = await this.admitted(call, ANY, (request) => this.tei.tokenize(request, body));
    return {
      tokens: tokens.map(({ start, stop, ...token }) => ({
        ...token,
        start: start ?? undefined,
        stop: stop ?? undefined,
      })),
    };
  }

  async decode(m: Message, call: GrpcCall) {
    const body = parse(decodeRequest, { ids: m.ids ?? [], skip_special_tokens: m.skip_special_tokens ?? false });
    const [[text]] = await this.admitted(call, ANY, (request) => this.tei.decode(request, body));
    return { text };
  }

  info(call: GrpcCall) {
    const info = this.tei.info(call.metadata('x-model'));
    const [type] = Object.keys(info.model_type) as Array<keyof typeof MODEL_TYPE>;
    return {
      version: info.version,
      model_id: info.model_id,
      ...(info.model_sha ? { model_sha: info.model_sha } : {}),
      model_dtype: info.model_dtype,
      model_type: MODEL_TYPE[type],
      max_concurrent_requests: info.max_concurrent_requests,
      max_input_length: info.max_input_length,
      max_batch_tokens: Number.isFinite(info.max_batch_tokens) ? info.max_batch_tokens : 0,
      ...(Number.isFinite(info.max_batch_requests) ? { max_batch_requests: info.max_batch_requests } : {}),
      max_client_batch_size: info.max_client_batch_size,
      tokenization_workers: info.tokenization_workers,
    };
  }
}

export function teiGrpc(parts: ProtocolParts): GrpcService[] {
  const tei = new TeiMessages(parts);
  const service = (name: string, unary: GrpcService['unary'], more: Partial<GrpcService> = {}): GrpcService => ({
    protoFile: 'tei.proto',
    name: `tei.v1.${name}`,
    unary,
    ...more,
  });
  return [
    service('Info', { Info: async (_request, call) => tei.info(call) }),
    service(
      'Embed',
      {
        Embed: (request, call) => tei.embed(request as Message, call),
        EmbedSparse: (request, call) => tei.embedSparse(request as Message, call),
        EmbedAll: (request, call) => tei.embedAll(request as Message, call),
      },
      {
        streams: {
          EmbedStream: (requests, send, call) => inOrder(requests, send, (m) => tei.embed(m, call)),
          EmbedSparseStream: (requests, send, call) => inOrder(requests, send, (m) => tei.embedSparse(m, call)),
          EmbedAllStream: (requests, send, call) => inOrder(requests, send, (m) => tei.embedAll(m, call)),
        },
      },
    ),
    service(
      'Predict',
      {
        Predict: (request, call) => tei.predict(request as Message, call, false),
        PredictPair: (request, call) => tei.predict(request as Message, call, true),
      },
      {
        streams: {
          PredictStream: (requests, send, call) => inOrder(requests, send, (m) => tei.predict(m, call, false)),
          PredictPairStream: (requests, send, call) => inOrder(requests, send, (m) => tei.predict(m, call, true)),
        },
      },
    ),
    service(
      'Rerank',
      { Rerank: (request, call) => tei.rerank(request as Message, call) },
      {
        gathers: {
          // One text a message; the query, raw_scores and return_text are the first message's.
          RerankStream: async (requests, call) => {
            const messages: Message[] = [];
            for await (const request of requests) messages.push(request as Message);
            const [first] = messages;
            if (!first) throw new ApiError('validation', 'the stream sent no texts to rerank');
            return tei.rerank({ ...first, texts: messages.map((m) => m.text ?? '') }, call);
          },
        },
      },
    ),
    service(
      'Tokenize',
      {
        Tokenize: (request, call) => tei.tokenize(request as Message, call),
        Decode: (request, call) => tei.decode(request as Message, call),
      },
      {
        streams: {
          TokenizeStream: (requests, send, call) => inOrder(requests, send, (m) => tei.tokenize(m, call)),
          DecodeStream: (requests, send, call) => inOrder(requests, send, (m) => tei.decode(m, call)),
        },
      },
    ),
  ];
}
