/**
 * Issue 58: the gateway's gRPC port (GRPC_PORT) speaks KServe v2 / Triton's GRPCInferenceService,
 * gRPC health and server reflection, through the same admission, deadlines and workers as HTTP.
 * The calls come from `@grpc/grpc-js` clients built from the repository's own .proto files, as a
 * user's generated client would make them; each answer is held to HTTP's for the same inputs.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import net from 'node:net';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { ROOT, TestSystem, uniquePrefix, waitFor, type Proc } from './helpers/system.ts';
import { CLASSIFIER, EMBEDDER, RERANKER } from './helpers/replicas.ts';
import { bytesTensor } from './helpers/triton.ts';
import { grpcClient, texts, unary, type GrpcClient } from './helpers/grpc.ts';

async function refusal(call: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await call;
  } catch (err) {
    return err as grpc.ServiceError;
  }
  assert.fail('the call was answered, not refused');
}

const floats = (bytes: Buffer) => Array.from(new Float32Array(new Uint8Array(bytes).buffer));

const inferOf = (model: string, extra: object = {}) => ({
  model_name: model,
  inputs: [texts('a fine film', 'a dull one')],
  ...extra,
});

describe('gRPC: KServe v2 / Triton, health and reflection', () => {
  const system = new TestSystem(uniquePrefix('grpc'));
  let inference: GrpcClient;

  before(async () => {
    await system.startGateway({ MAX_BODY_BYTES: 65536 });
    system.startWorker({ model: CLASSIFIER, env: { BATCH_MAX_SIZE: 16 } });
    system.startWorker({ model: EMBEDDER });
    system.startWorker({ model: RERANKER });
    for (const model of [CLASSIFIER, EMBEDDER, RERANKER]) await system.waitForWorkers(model);
    inference = grpcClient('inference.GRPCInferenceService', system.grpcPort);
    for (const name of ['Info', 'Embed', 'Predict', 'Rerank', 'Tokenize'])
      tei[name] = grpcClient(`tei.v1.${name}`, system.grpcPort, 'tei.proto');
  });
  after(async () => {
    inference?.close();
    for (const client of Object.values(tei)) client.close();
    await system.stop();
  });
  const tei: Record<string, GrpcClient> = {};

  /** A stream's answers, in order, once the server ends it. */
  const streamed = (stream: grpc.ClientDuplexStream<object, any>, requests: object[]) =>
    new Promise<any[]>((resolve, reject) => {
      const answers: any[] = [];
      stream.on('data', (answer) => answers.push(answer));
      stream.on('end', () => resolve(answers));
      stream.on('error', reject);
      for (const request of requests) stream.write(request);
      stream.end();
    });

  it("TEI's tei.v1 services answer as its HTTP routes do: Info, Embed, EmbedAll, Predict, PredictPair, Rerank, Tokenize, Decode", async () => {
    const model = { 'x-model': EMBEDDER };
    const info = await unary(tei.Info, 'Info', {}, { metadata: model });
    const httpInfo = (await (await fetch(`${system.url}/info`, { headers: model })).json()) as any;
    assert.equal(info.model_id, httpInfo.model_id);
    assert.equal(info.model_type, 'MODEL_TYPE_EMBEDDING');
    assert.equal(info.max_input_length, httpInfo.max_input_length);
    assert.equal(info.max_client_batch_size, httpInfo.max_client_batch_size);

    const all = await unary(tei.Embed, 'EmbedAll', { inputs: 'a fine film' });
    const httpAll = await system.post('/embed_all', { inputs: 'a fine film' });
    assert.deepEqual(
      all.token_embeddings.map((t: { embeddings: number[] }) => t.embeddings),
      (httpAll.body as number[][][])[0].map((v) => v.map(Math.fround)),
    );
    // No served model is sparse here: embeddings.test.ts has one.
    const sparse = await refusal(unary(tei.Embed, 'EmbedSparse', { inputs: 'a fine film' }));
    assert.equal(sparse.code, grpc.status.UNAVAILABLE);
    assert.match(sparse.details, /no served model is a sparse model/);

    for (const [request, body] of [
      [{ inputs: 'a fine film' }, { inputs: 'a fine film' }],
      [
        { inputs: 'a fine film', normalize: false, dimensions: 8 },
        { inputs: 'a fine film', normalize: false, dimensions: 8 },
      ],
    ]) {
      const embedded = await unary(tei.Embed, 'Embed', request);
      const http = await system.post('/embed', body);
      assert.deepEqual(embedded.embeddings, (http.body as number[][])[0].map(Math.fround));
      assert.ok(embedded.metadata.inference_time_ns > 0, JSON.stringify(embedded.metadata));
    }

    const classifier = { 'x-model': CLASSIFIER };
    const predicted = await unary(tei.Predict, 'Predict', { inputs: 'a fine film' }, { metadata: classifier });
    const httpPredicted = await system.post('/predict', { inputs: 'a fine film' }, classifier);
    const rounded = (scores: Array<{ label: string; score: number }>) =>
      scores.map(({ label, score }) => ({ label, score: Math.fround(score) }));
    assert.deepEqual(predicted.predictions, rounded(httpPredicted.body));
    const pair = await unary(
      tei.Predict,
      'PredictPair',
      { inputs: ['a', 'b'], raw_scores: true },
      { metadata: classifier },
    );
    const httpPair = await system.post('/predict', { inputs: ['a', 'b'], raw_scores: true }, classifier);
    assert.deepEqual(pair.predictions, rounded(httpPair.body));

    const texts = ['Paris is the capital of France.', 'Cats sleep a lot.', 'Berlin is in Germany.'];
    const ranked = await unary(tei.Rerank, 'Rerank', { query: 'the capital of France', texts, return_text: true });
    const httpRanked = await system.post('/rerank', { query: 'the capital of France', texts, return_text: true });
    const ranks = (list: Array<{ index: number; score: number; text?: string }>) =>
      list.map(({ index, score, text }) => ({ index, score: Math.fround(score), text }));
    assert.deepEqual(ranks(ranked.ranks), ranks(httpRanked.body));
    // Streamed in, one text a message: the query and return_text are the first message's.
    const gathered = await new Promise<any>((resolve, reject) => {
      const call = tei.Rerank.RerankStream((err: grpc.ServiceError | null, answer: any) =>
        err ? reject(err) : resolve(answer),
      );
      for (const text of texts) call.write({ query: 'the capital of France', text, return_text: true });
      call.end();
    });
    assert.deepEqual(ranks(gathered.ranks), ranks(httpRanked.body));

    // proto3's bool is false unless sent: as in TEI, no special tokens unless asked for.
    for (const add of [false, true]) {
      const tokens = await unary(
        tei.Tokenize,
        'Tokenize',
        { inputs: 'héllo world', add_special_tokens: add },
        { metadata: classifier },
      );
      const http = await system.post('/tokenize', { inputs: 'héllo world', add_special_tokens: add }, classifier);
      const plain = (list: any[]) =>
        list.map(({ id, text, special, start, stop }) => ({
          id,
          text,
          special,
          start: start ?? null,
          stop: stop ?? null,
        }));
      assert.deepEqual(plain(tokens.tokens), plain((http.body as any[][])[0]));
    }

    // Decode's flag is proto3's bool too: special tokens kept unless asked to skip them, as in TEI.
    const ids = ((await system.post('/tokenize', { inputs: 'héllo world' }, classifier)).body as any[][])[0].map(
      (t) => t.id,
    );
    for (const skip of [false, true]) {
      const decoded = await unary(tei.Tokenize, 'Decode', { ids, skip_special_tokens: skip }, { metadata: classifier });
      const http = await system.post('/decode', { ids, skip_special_tokens: skip }, classifier);
      assert.deepEqual([decoded.text], http.body);
    }
    const decodeMetadata = new grpc.Metadata();
    decodeMetadata.set('x-model', CLASSIFIER);
    const streamedTexts = await streamed(tei.Tokenize.DecodeStream(decodeMetadata), [
      { ids: ids.slice(0, 2) },
      { ids, skip_special_tokens: true },
    ]);
    const [first] = (await system.post('/decode', { ids: ids.slice(0, 2), skip_special_tokens: false }, classifier))
      .body;
    const [second] = (await system.post('/decode', { ids }, classifier)).body;
    assert.deepEqual(
      streamedTexts.map((a) => a.text),
      [first, second],
    );
  });

  it("TEI's streams answer in order; a bad request and a method not served get their statuses", async () => {
    const inputs = ['one text', 'another text', 'a third'];
    const answers = await streamed(
      tei.Embed.EmbedStream(),
      inputs.map((text) => ({ inputs: text })),
    );
    const http = await system.post('/embed', { inputs });
    assert.deepEqual(
      answers.map((a) => a.embeddings),
      (http.body as number[][]).map((v) => v.map(Math.fround)),
    );
    const metadata = new grpc.Metadata();
    metadata.set('x-model', CLASSIFIER);
    const pairs = await streamed(tei.Predict.PredictPairStream(metadata), [
      { inputs: ['a', 'b'] },
      { inputs: ['c', 'd'] },
    ]);
    assert.equal(pairs.length, 2);

    const notPair = await refusal(
      unary(tei.Predict, 'PredictPair', { inputs: ['a', 'b', 'c'] }, { metadata: { 'x-model': CLASSIFIER } }),
    );
    assert.equal(notPair.code, grpc.status.INVALID_ARGUMENT);
    assert.match(notPair.details, /pair/);
    // Two classifiers are served (the reranker is one): the model must be named.
    const unnamed = await refusal(unary(tei.Predict, 'Predict', { inputs: 'a' }));
    assert.equal(unnamed.code, grpc.status.INVALID_ARGUMENT);
    assert.match(unnamed.details, /several served models/);
    const empty = await refusal(unary(tei.Embed, 'Embed', { inputs: '' }));
    assert.equal(empty.code, grpc.status.INVALID_ARGUMENT);
    const unimplemented = await refusal(
      new Promise((resolve, reject) =>
        tei.Embed.makeUnaryRequest(
          '/tei.v1.Tokenize/Detokenize',
          () => Buffer.alloc(0),
          (b: Buffer) => b,
          {},
          (err: grpc.ServiceError | null, answer: unknown) => (err ? reject(err) : resolve(answer)),
        ),
      ),
    );
    assert.equal(unimplemented.code, grpc.status.UNIMPLEMENTED);
  });

  it('server and model health and metadata, as HTTP answers them', async () => {
    assert.deepEqual(await unary(inference, 'ServerLive', {}), { live: true });
    assert.deepEqual(await unary(inference, 'ServerReady', {}), { ready: true });
    const server = await unary(inference, 'ServerMetadata', {});
    const httpServer = await (await fetch(`${system.url}/v2`)).json();
    assert.deepEqual(server, httpServer);
    assert.deepEqual(await unary(inference, 'ModelReady', { name: CLASSIFIER }), { ready: true });
    assert.deepEqual(await unary(inference, 'ModelReady', { name: CLASSIFIER, version: '1' }), { ready: true });
    for (const model of [CLASSIFIER, EMBEDDER]) {
      const metadata = await unary(inference, 'ModelMetadata', { name: model });
      const { parameters, ...http } = (await (await fetch(`${system.url}/v2/models/${model}`)).json()) as Record<
        string,
        unknown
      >;
      assert.deepEqual(metadata, http);
      assert.ok(parameters, 'HTTP adds parameters, which the gRPC message has no field for');
    }
  });

  it("config and statistics: Triton's messages, equal to HTTP's JSON in every field they share", async () => {
    const { config } = await unary(inference, 'ModelConfig', { name: CLASSIFIER });
    const http = (await (await fetch(`${system.url}/v2/models/${CLASSIFIER}/config`)).json()) as any;
    assert.equal(config.max_batch_size, 16);
    for (const field of [
      'name',
      'platform',
      'backend',
      'max_batch_size',
      'input',
      'output',
      'instance_group',
      'parameters',
      'dynamic_batching',
    ])
      assert.deepEqual(config[field], http[field], field);
    assert.deepEqual(config.version_policy, { latest: { num_versions: 1 }, policy_choice: 'latest' });
    await unary(inference, 'ModelInfer', inferOf(CLASSIFIER));
    // Statistics come with the workers' heartbeats: equal once both answers were read between two.
    await waitFor('gRPC and HTTP statistics to agree', async () => {
      const { model_stats: grpcStats } = await unary(inference, 'ModelStatistics', { name: CLASSIFIER });
      const { model_stats: httpStats } = (await (
        await fetch(`${system.url}/v2/models/${CLASSIFIER}/stats`)
      ).json()) as any;
      const [g, h] = [grpcStats[0], httpStats[0]];
      return (
        g.inference_count > 0 &&
        g.inference_count === h.inference_count &&
        g.execution_count === h.execution_count &&
        JSON.stringify(g.inference_stats) === JSON.stringify(h.inference_stats) &&
        JSON.stringify(g.batch_stats) === JSON.stringify(h.batch_stats)
      );
    });
    const all = await unary(inference, 'ModelStatistics', {});
    assert.deepEqual(all.model_stats.map((m: any) => m.name).sort(), [CLASSIFIER, EMBEDDER, RERANKER].sort());
  });

  it("infers from typed and raw BYTES inputs, and answers HTTP's numbers as raw FP32", async () => {
    const http = await system.post(`/v2/models/${CLASSIFIER}/infer`, {
      inputs: [{ name: 'text', datatype: 'BYTES', shape: [2], data: ['a fine film', 'a dull one'] }],
      outputs: [{ name: 'probabilities' }, { name: 'logits' }],
    });
    assert.equal(http.status, 200, JSON.stringify(http.body));
    const outputs = [{ name: 'probabilities' }, { name: 'logits' }];
    const typed = await unary(inference, 'ModelInfer', inferOf(CLASSIFIER, { id: 'r1', outputs }));
    const raw = await unary(inference, 'ModelInfer', {
      model_name: CLASSIFIER,
      id: 'r2',
      inputs: [{ name: 'text', datatype: 'BYTES', shape: [2, 1] }],
      raw_input_contents: [bytesTensor(['a fine film', 'a dull one'])],
      outputs,
    });
    for (const [answer, id] of [
      [typed, 'r1'],
      [raw, 'r2'],
    ] as const) {
      assert.equal(answer.model_name, CLASSIFIER);
      assert.equal(answer.model_version, '1');
      assert.equal(answer.id, id);
      assert.deepEqual(
        answer.outputs.map((o: any) => [o.name, o.datatype, o.shape]),
        http.body.outputs.map((o: any) => [o.name, o.datatype, o.shape]),
      );
      answer.raw_output_contents.forEach((bytes: Buffer, i: number) =>
        assert.deepEqual(floats(bytes), http.body.outputs[i].data.map(Math.fround)),
      );
    }
    const embedded = await unary(inference, 'ModelInfer', inferOf(EMBEDDER));
    const httpEmbedded = await system.post(`/v2/models/${EMBEDDER}/infer`, {
      inputs: [{ name: 'text', datatype: 'BYTES', shape: [2], data: ['a fine film', 'a dull one'] }],
    });
    assert.deepEqual(embedded.outputs[0].shape, httpEmbedded.body.outputs[0].shape);
    assert.deepEqual(floats(embedded.raw_output_contents[0]), httpEmbedded.body.outputs[0].data.map(Math.fround));
  });

  it("answers tritonclient's class_count as BYTES value:index:label, as HTTP does", async () => {
    const classification = { classification: { int64_param: 1 } };
    const answer = await unary(
      inference,
      'ModelInfer',
      inferOf(CLASSIFIER, { outputs: [{ name: 'probabilities', parameters: classification }] }),
    );
    const http = await system.post(`/v2/models/${CLASSIFIER}/infer`, {
      inputs: [{ name: 'text', datatype: 'BYTES', shape: [2], data: ['a fine film', 'a dull one'] }],
      outputs: [{ name: 'probabilities', parameters: { classification: 1 } }],
    });
    assert.equal(answer.outputs[0].datatype, 'BYTES');
    assert.deepEqual(answer.outputs[0].shape, [2, 1]);
    const raw: Buffer = answer.raw_output_contents[0];
    const elements: string[] = [];
    for (let at = 0; at < raw.length;) {
      const length = raw.readUInt32LE(at);
      elements.push(raw.subarray(at + 4, at + 4 + length).toString());
      at += 4 + length;
    }
    assert.deepEqual(elements, http.body.outputs[0].data);
  });

  it('refuses bad requests with the status that says why, and a message naming the fault', async () => {
    const cases: Array<[object, grpc.status, RegExp]> = [
      [{ model_name: CLASSIFIER, inputs: [] }, grpc.status.INVALID_ARGUMENT, /exactly one input tensor/],
      [
        {
          model_name: CLASSIFIER,
          inputs: [{ name: 'text', datatype: 'FP32', shape: [1], contents: { fp32_contents: [1] } }],
        },
        grpc.status.INVALID_ARGUMENT,
        /datatype must be BYTES/,
      ],
      [
        {
          model_name: CLASSIFIER,
          inputs: [{ name: 'text', datatype: 'BYTES', shape: [1] }],
          raw_input_contents: [Buffer.from([9, 0, 0, 0, 65])],
        },
        grpc.status.INVALID_ARGUMENT,
        /element 0 is 9 bytes/,
      ],
      [inferOf(CLASSIFIER, { outputs: [{ name: 'nope' }] }), grpc.status.INVALID_ARGUMENT, /unknown output/],
      [inferOf('replica/not-a-model'), grpc.status.NOT_FOUND, /not served/],
      [inferOf(CLASSIFIER, { model_version: '2' }), grpc.status.NOT_FOUND, /version 2/],
    ];
    for (const [request, code, message] of cases) {
      const err = await refusal(unary(inference, 'ModelInfer', request));
      assert.equal(err.code, code, `${JSON.stringify(request).slice(0, 120)}: ${err.details}`);
      assert.match(err.details, message);
      assert.doesNotMatch(err.details, /\bat .*\.js:\d+/, 'no stack trace');
    }
    assert.equal(
      (await refusal(unary(inference, 'ModelMetadata', { name: 'replica/not-a-model' }))).code,
      grpc.status.NOT_FOUND,
    );
    assert.equal(
      (await refusal(unary(inference, 'ModelReady', { name: 'replica/not-a-model' }))).code,
      grpc.status.NOT_FOUND,
    );
    // A message over the gateway's MAX_BODY_BYTES is refused whole, and the gateway serves on.
    const huge = await refusal(
      unary(inference, 'ModelInfer', inferOf(CLASSIFIER, { inputs: [texts('x'.repeat(100_000))] })),
    );
    assert.equal(huge.code, grpc.status.RESOURCE_EXHAUSTED);
    assert.deepEqual(await unary(inference, 'ServerLive', {}), { live: true });
    // Counted in /metrics by method and status, as HTTP's requests are by route and status.
    const counted = (status: string) =>
      system.metric('tserve_grpc_requests_total', { method: 'inference.GRPCInferenceService/ModelInfer', status });
    assert.equal(await counted('INVALID_ARGUMENT'), 4);
    assert.equal(await counted('NOT_FOUND'), 2);
    assert.ok((await counted('OK')) >= 1);
    // Bytes that are no ModelInferRequest at all (a field cut short): refused, and the gateway serves on.
    const garbage = await refusal(
      new Promise((resolve, reject) =>
        inference.makeUnaryRequest(
          '/inference.GRPCInferenceService/ModelInfer',
          () => Buffer.from([0x0a, 0x10, 0x41]),
          (b: Buffer) => b,
          {},
          (err: grpc.ServiceError | null, answer: unknown) => (err ? reject(err) : resolve(answer)),
        ),
      ),
    );
    assert.ok(
      [grpc.status.INTERNAL, grpc.status.INVALID_ARGUMENT].includes(garbage.code),
      `${garbage.code} ${garbage.details}`,
    );
    assert.doesNotMatch(garbage.details, /\bat .*\.js:\d+/, 'no stack trace');
    assert.deepEqual(await unary(inference, 'ServerLive', {}), { live: true });
  });

  it('streams: each request answered on its own, a bad one by its error_message, the stream going on', async () => {
    const stream = inference.ModelStreamInfer();
    const answers: any[] = [];
    const ended = new Promise<void>((resolve, reject) => {
      stream.on('data', (answer: any) => answers.push(answer));
      stream.on('end', resolve);
      stream.on('error', reject);
    });
    stream.write(inferOf(CLASSIFIER, { id: 'a' }));
    stream.write(inferOf(CLASSIFIER, { id: 'b', inputs: [] }));
    stream.write(inferOf(EMBEDDER, { id: 'c' }));
    stream.end();
    await ended;
    const byId = Object.fromEntries(answers.map((a) => [a.infer_response.id, a]));
    assert.deepEqual(Object.keys(byId).sort(), ['a', 'b', 'c']);
    assert.equal(byId.a.error_message, '');
    assert.deepEqual(byId.a.infer_response.outputs[0].shape, [2, 2]);
    assert.match(byId.b.error_message, /exactly one input tensor/);
    assert.equal(byId.c.infer_response.outputs[0].name, 'embeddings');
  });

  it('serves grpc.health.v1 and server reflection, for probes and grpcurl', async () => {
    const healthDir = path.join(ROOT, 'node_modules/grpc-health-check/proto');
    const health = grpcClient('grpc.health.v1.Health', system.grpcPort, 'health/v1/health.proto', [healthDir]);
    // The health service follows readiness at the registry's pace: serving once the workers are.
    for (const service of ['', 'inference.GRPCInferenceService'])
      await waitFor(
        `${service || 'the server'} SERVING`,
        async () => (await unary(health, 'Check', { service })).status === 'SERVING',
      );
    assert.equal((await refusal(unary(health, 'Check', { service: 'no.Such' }))).code, grpc.status.NOT_FOUND);
    health.close();

    const reflectionDir = path.join(ROOT, 'node_modules/@grpc/reflection/build/proto');
    const reflection = grpcClient(
      'grpc.reflection.v1.ServerReflection',
      system.grpcPort,
      'grpc/reflection/v1/reflection.proto',
      [reflectionDir],
    );
    const call = reflection.ServerReflectionInfo();
    const answer = new Promise<any>((resolve, reject) => {
      call.once('data', resolve);
      call.once('error', reject);
    });
    call.write({ list_services: '' });
    const listed = (await answer).list_services_response.service.map((s: { name: string }) => s.name);
    call.end();
    reflection.close();
    assert.ok(listed.includes('inference.GRPCInferenceService'), listed.join(', '));
  });
});

describe('gRPC admission: keys, shedding, deadlines and a cancelled stream', () => {
  const IDLE = 'replica/tiny-bert-ner';
  const system = new TestSystem(uniquePrefix('grpc-admission'));
  const token = 'tsk_grpc1_secret';
  let inference: GrpcClient;
  const backlog = async () =>
    ((await (await fetch(`${system.url}/backlog?model=${IDLE}`)).json()) as { backlog: number }).backlog;

  /** A key allowed two requests a minute. */
  const limited = 'tsk_grpc2_limited';

  before(async () => {
    const hash = `sha256:${createHash('sha256').update('secret').digest('hex')}`;
    const limitedHash = `sha256:${createHash('sha256').update('limited').digest('hex')}`;
    await system.startGateway({
      API_KEYS: JSON.stringify({
        keys: [
          { id: 'grpc1', name: 'grpc', hash, models: [CLASSIFIER, IDLE] },
          { id: 'grpc2', name: 'limited', hash: limitedHash, rate: { requests: 2, per_seconds: 3600 } },
        ],
      }),
      // A model configured with no worker: its requests wait (x-wait-for-model) and count in the backlog.
      MODELS: IDLE,
      MAX_QUEUE_DEPTH: 2,
    });
    system.startWorker({ model: CLASSIFIER });
    await system.waitForWorkers(CLASSIFIER);
    inference = grpcClient('inference.GRPCInferenceService', system.grpcPort);
  });
  after(async () => {
    inference?.close();
    await system.stop();
  });

  it('takes the key from authorization or x-api-key metadata, and refuses none, a wrong one and a model it may not call', async () => {
    for (const metadata of [{ authorization: `Bearer ${token}` }, { 'x-api-key': token }] as Array<
      Record<string, string>
    >) {
      const answer = await unary(inference, 'ModelInfer', inferOf(CLASSIFIER), { metadata });
      assert.equal(answer.model_name, CLASSIFIER);
    }
    const none = await refusal(unary(inference, 'ModelInfer', inferOf(CLASSIFIER)));
    assert.equal(none.code, grpc.status.UNAUTHENTICATED);
    assert.match(none.details, /API key is required/);
    const wrong = await refusal(
      unary(inference, 'ModelInfer', inferOf(CLASSIFIER), { metadata: { authorization: 'Bearer tsk_grpc1_nope' } }),
    );
    assert.equal(wrong.code, grpc.status.UNAUTHENTICATED);
    const forbidden = await refusal(
      unary(inference, 'ModelInfer', inferOf(EMBEDDER), { metadata: { authorization: `Bearer ${token}` } }),
    );
    assert.equal(forbidden.code, grpc.status.PERMISSION_DENIED);
    assert.match(forbidden.details, /may not call model/);
    const priority = await refusal(
      unary(inference, 'ModelInfer', inferOf(CLASSIFIER), {
        metadata: { authorization: `Bearer ${token}`, 'x-priority': 'urgent' },
      }),
    );
    assert.equal(priority.code, grpc.status.INVALID_ARGUMENT);
  });

  it("a key's quota holds over gRPC: past it, RESOURCE_EXHAUSTED with retry-after, on TEI's services too", async () => {
    const metadata = { 'x-api-key': limited };
    for (let i = 0; i < 2; i++) await unary(inference, 'ModelInfer', inferOf(CLASSIFIER), { metadata });
    const over = await refusal(unary(inference, 'ModelInfer', inferOf(CLASSIFIER), { metadata }));
    assert.equal(over.code, grpc.status.RESOURCE_EXHAUSTED, over.details);
    assert.match(over.details, /API key limited is over its rate of 2 requests per 3600 s/);
    assert.equal(over.metadata.get('error-type')[0], 'rate_limited');
    assert.ok(Number(over.metadata.get('retry-after')[0]) > 0);
    const tei = grpcClient('tei.v1.Predict', system.grpcPort, 'tei.proto');
    try {
      const teiOver = await refusal(unary(tei, 'Predict', { inputs: 'a' }, { metadata }));
      assert.equal(teiOver.code, grpc.status.RESOURCE_EXHAUSTED, teiOver.details);
    } finally {
      tei.close();
    }
  });

  it('a request waiting for its model past its gRPC deadline is DEADLINE_EXCEEDED, and leaves the backlog; without waiting, UNAVAILABLE', async () => {
    const metadata = { authorization: `Bearer ${token}` };
    assert.equal(await backlog(), 0);
    const waited = unary(inference, 'ModelInfer', inferOf(IDLE), {
      metadata: { ...metadata, 'x-wait-for-model': 'true' },
      deadlineMs: 1500,
    });
    await waitFor('the waiting request in the backlog', async () => (await backlog()) === 1);
    assert.equal((await refusal(waited)).code, grpc.status.DEADLINE_EXCEEDED);
    await waitFor('the backlog empty once the deadline passed', async () => (await backlog()) === 0);
    // Refused at once, as HTTP's 503 "currently loading"; it counts in the backlog until its deadline, as if it waited.
    const loading = await refusal(unary(inference, 'ModelInfer', inferOf(IDLE), { metadata, deadlineMs: 1000 }));
    assert.equal(loading.code, grpc.status.UNAVAILABLE, loading.details);
    assert.match(loading.details, /currently loading/);
    await waitFor('the backlog empty once its deadline passed', async () => (await backlog()) === 0);
  });

  it('sheds with RESOURCE_EXHAUSTED once the queue is full, and a cancelled stream drops its waiting requests', async () => {
    const metadata = new grpc.Metadata();
    metadata.set('authorization', `Bearer ${token}`);
    metadata.set('x-wait-for-model', 'true');
    const stream = inference.ModelStreamInfer(metadata);
    const cancelled = new Promise<grpc.ServiceError>((resolve) => stream.on('error', resolve));
    stream.on('data', () => assert.fail('no answer is due: no worker serves the model'));
    stream.write(inferOf(IDLE, { id: 'x' }));
    stream.write(inferOf(IDLE, { id: 'y' }));
    await waitFor('both waiting in the backlog', async () => (await backlog()) === 2);
    const shed = await refusal(
      unary(inference, 'ModelInfer', inferOf(IDLE), {
        metadata: { authorization: `Bearer ${token}`, 'x-wait-for-model': 'true' },
      }),
    );
    assert.equal(shed.code, grpc.status.RESOURCE_EXHAUSTED, shed.details);
    assert.equal(shed.metadata.get('retry-after').length, 1);
    stream.cancel();
    assert.equal((await cancelled).code, grpc.status.CANCELLED);
    await waitFor('the cancelled stream’s requests gone from the backlog', async () => (await backlog()) === 0);
  });
});

describe("gRPC connections: silent and flooding clients are bounded as HTTP's are", () => {
  const system = new TestSystem(uniquePrefix('grpc-connections'));
  let worker: Proc | undefined;
  const sockets: net.Socket[] = [];
  /** A raw connection to the gRPC port that sends nothing; resolves once it is open (or already closed). */
  const silent = async (port: number, closed: () => void) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => {});
    socket.on('close', closed);
    // Whatever the server sends (its HTTP/2 settings) is read and dropped, so that its closing is seen.
    socket.resume();
    sockets.push(socket);
    await new Promise((ready) => socket.once('connect', ready).once('close', ready));
  };

  before(async () => {
    await system.startGateway({ MAX_CONNECTIONS: 20, HTTP_HEADERS_TIMEOUT_MS: 60_000 });
    worker = system.startWorker({ model: CLASSIFIER });
    await system.waitForWorkers(CLASSIFIER);
  });
  after(async () => {
    for (const socket of sockets) socket.destroy();
    await system.stop();
  });

  it('holds at most MAX_CONNECTIONS, closes the rest on arrival, and serves a client it holds throughout', async () => {
    const client = grpcClient('inference.GRPCInferenceService', system.grpcPort);
    try {
      assert.equal((await unary(client, 'ModelInfer', inferOf(CLASSIFIER))).model_name, CLASSIFIER);
      let closed = 0;
      for (let i = 0; i < 30; i++) await silent(system.grpcPort, () => closed++);
      // The headers' timeout is a minute: only the caps can have closed these.
      await waitFor('connections beyond the caps closed', async () => closed >= 10, 10_000);
      assert.equal((await unary(client, 'ModelInfer', inferOf(CLASSIFIER))).model_name, CLASSIFIER);
      assert.ok((await system.metric('tserve_connections_dropped_total')) >= closed);
    } finally {
      client.close();
    }
    assert.ok(system.gateway?.running && worker?.running);
  });

  it('closes a connection that sends no HTTP/2 preface within HTTP_HEADERS_TIMEOUT_MS', async () => {
    for (const socket of sockets.splice(0)) socket.destroy();
    const quick = new TestSystem(system.prefix);
    try {
      await quick.startGateway({ HTTP_HEADERS_TIMEOUT_MS: 500 });
      let closed = 0;
      for (let i = 0; i < 3; i++) await silent(quick.grpcPort, () => closed++);
      await waitFor('the silent connections closed', async () => closed === 3, 10_000);
      // A client that speaks is not: it is answered after the same wait.
      const client = grpcClient('inference.GRPCInferenceService', quick.grpcPort);
      await new Promise((r) => setTimeout(r, 1000));
      assert.deepEqual(await unary(client, 'ServerLive', {}), { live: true });
      client.close();
    } finally {
      await quick.gateway?.stop();
    }
  });
});
