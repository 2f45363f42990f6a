/**
 * Issue 49: an OpenAPI description of every route. The served document must validate as OpenAPI
 * 3.1; every example of README.md and docs/, a bad input for every route that reads one, and a
 * request for each route the docs do not call, are sent to a running system, and each real answer
 * (status, content type, body) must be one the document lists for its route, with a body its
 * schema accepts. Then a client generated from the document (openapi-typescript types, the
 * openapi-fetch client) must compile against a typed call of each protocol, and run.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import openapiTS, { astToString } from 'openapi-typescript';
import ts from 'typescript';
import { ROOT, TestSystem, uniquePrefix } from './helpers/system.ts';
import { curlExample, docExamples, readmeModels } from './helpers/doc-examples.ts';
import { CLASSIFIER, EMBEDDER, DEFAULT_CLASSIFIER, RERANKER } from './helpers/replicas.ts';
import { foreignRequests, launchBrowser, noBrowser } from './helpers/browser.ts';

type Json = Record<string, any>;

interface Answer {
  method: string;
  /** The path as sent: percent-encoded. */
  path: string;
  status: number;
  contentType: string;
  body: string;
  /** The x-cache header, where the response cache answered or missed. */
  cache?: string;
}

/** Checks real answers against one OpenAPI document, and records which operations it has seen. */
class Contract {
  readonly seen = new Set<string>();
  private readonly ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
  private readonly validators = new Map<object, ValidateFunction>();
  private readonly routes: Array<{ template: string; pattern: RegExp; literal: number }>;

  constructor(readonly doc: Json) {
    this.routes = Object.keys(doc.paths).map((template) => ({
      template,
      // A model id holds a slash: {model} spans segments, every other parameter is one segment.
      pattern: new RegExp(`^${template.replace(/\{model\}/g, '(.+)').replace(/\{[^}]+\}/g, '([^/]+)')}$`),
      literal: template.replace(/\{[^}]+\}/g, '').length,
    }));
  }

  /** Every operation of the document, as "METHOD template". */
  operations(): string[] {
    return Object.entries(this.doc.paths as Json).flatMap(([template, item]) =>
      Object.keys(item).map((method) => `${method.toUpperCase()} ${template}`),
    );
  }

  /** The most specific route whose template matches the path (`/v2/models/{model}/ready` before `/v2/models/{model}`). */
  route(method: string, pathAndQuery: string): { key: string; operation: Json } {
    const path = pathAndQuery.replace(/\?.*$/, '');
    const matching = this.routes.filter(
      (r) => r.pattern.test(path) && this.doc.paths[r.template][method.toLowerCase()],
    );
    assert.ok(matching.length, `${method} ${path}: no route of the document matches it`);
    const { template } = matching.sort((a, b) => b.literal - a.literal)[0];
    return { key: `${method.toUpperCase()} ${template}`, operation: this.doc.paths[template][method.toLowerCase()] };
  }

  /** Throws unless the document lists the answer's status and content type for its route, and its schema accepts the body. */
  check(answer: Answer): void {
    const { key, operation } = this.route(answer.method, answer.path);
    const where = `${key} (${answer.method} ${answer.path})`;
    const response = operation.responses[String(answer.status)];
    assert.ok(
      response,
      `${where}: status ${answer.status} is not in the document (it lists ${Object.keys(operation.responses).join(', ')}): ${answer.body.slice(0, 500)}`,
    );
    const media = answer.contentType.split(';')[0].trim();
    const content = response.content?.[media];
    assert.ok(
      content,
      `${where}: ${answer.status} answered ${media}, the document lists ${Object.keys(response.content ?? {}).join(', ') || 'no content'}`,
    );
    if (media === 'application/json' && content.schema) {
      const validate = this.validator(content.schema);
      const body: unknown = JSON.parse(answer.body);
      assert.ok(
        validate(body),
        `${where}: the ${answer.status} body does not have the document's shape: ${this.ajv.errorsText(validate.errors)}\n body: ${answer.body.slice(0, 1000)}`,
      );
    }
    this.seen.add(key);
  }

  /** Throws unless the document's schema for the route's JSON body accepts one the server took (a 2xx). */
  checkRequest(method: string, path: string, body: unknown): void {
    const { key, operation } = this.route(method, path);
    const schema = operation.requestBody?.content?.['application/json']?.schema;
    assert.ok(schema, `${key}: the document describes no JSON body`);
    const validate = this.validator(schema);
    assert.ok(
      validate(body),
      `${key}: the document refuses a body the server accepted: ${this.ajv.errorsText(validate.errors)}\n body: ${JSON.stringify(body).slice(0, 1000)}`,
    );
  }

  private validator(schema: object): ValidateFunction {
    let validate = this.validators.get(schema);
    if (!validate) {
      validate = this.ajv.compile(schema);
      this.validators.set(schema, validate);
    }
    return validate;
  }
}

async function send(
  base: string,
  method: string,
  path: string,
  init: { body?: string | Uint8Array; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const res = await fetch(`${base}${path}`, { method, headers: init.headers, body: init.body });
  return {
    method,
    path,
    status: res.status,
    contentType: res.headers.get('content-type') ?? '',
    body: await res.text(),
    cache: res.headers.get('x-cache') ?? undefined,
  };
}

const json = (body: unknown, headers: Record<string, string> = {}) => ({
  body: JSON.stringify(body),
  headers: { 'content-type': 'application/json', ...headers },
});

const MISSING = 'replica/no-such-model';

/** A multipart upload of one file, as OpenAI's clients send it to POST /v1/files. */
function upload(purpose: string, text: string) {
  const b = 'tserve-test-boundary';
  const part = (disposition: string, body: string) =>
    `--${b}\r\nContent-Disposition: form-data; ${disposition}\r\n\r\n${body}\r\n`;
  return {
    body: `${part('name="file"; filename="input.jsonl"', text)}${part('name="purpose"', purpose)}--${b}--\r\n`,
    headers: { 'content-type': `multipart/form-data; boundary=${b}` },
  };
}
const BATCH_LINE = JSON.stringify({
  custom_id: 'a',
  method: 'POST',
  url: '/v1/embeddings',
  body: { model: EMBEDDER, input: 'x' },
});
/** Configured on the keyed gateway (MODELS) and served by no worker: scaled to zero. */
const IDLE = CLASSIFIER;

/**
 * A bad input for every route that reads one, and a request for each route the docs' examples do
 * not call: each as method, path and what it sends. Paths are sent as written (model ids hold a
 * slash; one is sent as %2F, as generated clients send it).
 */
const REQUESTS: Array<[string, string, ReturnType<typeof json>?]> = [
  // POST /: an empty text, and a JSON body of the wrong shape.
  ['POST', '/', { body: '', headers: { 'content-type': 'text/plain' } }],
  ['POST', '/', json({ input: 'typo' })],
  // The Inference API.
  ['POST', `/models/${DEFAULT_CLASSIFIER}`, json({ inputs: 42 })],
  ['POST', `/models/${DEFAULT_CLASSIFIER}`, { body: 'inputs=x', headers: { 'content-type': 'text/plain' } }],
  ['POST', `/models/${DEFAULT_CLASSIFIER}`, json({ inputs: 'x'.repeat(1_100_000) })],
  ['POST', `/models/${DEFAULT_CLASSIFIER}`, json({ inputs: 'x', parameters: { top_p: 3 } })],
  ['POST', `/models/${DEFAULT_CLASSIFIER}`, json({ inputs: 'x' }, { 'x-request-timeout-ms': 'soon' })],
  ['POST', `/models/${DEFAULT_CLASSIFIER}`, json({ inputs: 'x' }, { 'x-priority': 'urgent' })],
  ['POST', `/models/${DEFAULT_CLASSIFIER}`, json({ inputs: 'x' }, { 'x-wait-for-model': 'maybe' })],
  [
    'POST',
    `/models/${DEFAULT_CLASSIFIER.replace('/', '%2F')}`,
    json({ inputs: 'I like it' }, { 'x-use-cache': 'false', 'x-priority': 'batch' }),
  ],
  ['POST', `/models/${MISSING}`, json({ inputs: 'x' })],
  ['POST', `/models/${EMBEDDER}/pipeline/no-such-task`, json({ inputs: 'x' })],
  ['POST', `/models/${EMBEDDER}/pipeline/feature-extraction`, json({ inputs: ['a', 'b'] })],
  // OpenAI.
  ['POST', '/v1/embeddings', json({ model: EMBEDDER, input: [] })],
  ['POST', '/v1/embeddings', json({ model: MISSING, input: 'x' })],
  ['POST', '/v1/embeddings', json({ model: EMBEDDER, input: 'x', encoding_format: 'base64', dimensions: 8 })],
  ['GET', '/v1/models', undefined],
  ['GET', `/v1/models/${MISSING}`, undefined],
  // OpenAI's routes without /v1, as TEI and Infinity serve them; a field OpenAI's body lacks.
  ['POST', '/embeddings', json({ model: EMBEDDER, input: ['a', 'b'], user: 'u', input_type: 'query' })],
  ['GET', '/models', undefined],
  ['GET', `/models/${EMBEDDER}`, undefined],
  // OpenAI's Batch API.
  ['POST', '/v1/files', upload('batch', BATCH_LINE)],
  ['POST', '/v1/files', upload('fine-tune', BATCH_LINE)],
  ['GET', '/v1/files?limit=2', undefined],
  ['GET', '/v1/files?limit=0', undefined],
  ['GET', '/v1/files/file-nope', undefined],
  ['GET', '/v1/files/file-nope/content', undefined],
  ['DELETE', '/v1/files/file-nope', undefined],
  ['POST', '/v1/batches', json({ input_file_id: 'file-nope', endpoint: '/v1/embeddings', completion_window: '24h' })],
  [
    'POST',
    '/v1/batches',
    json({ input_file_id: 'file-nope', endpoint: '/v1/chat/completions', completion_window: '24h' }),
  ],
  ['GET', '/v1/batches', undefined],
  ['GET', '/v1/batches?limit=many', undefined],
  ['GET', '/v1/batches/batch-nope', undefined],
  ['POST', '/v1/batches/batch-nope/cancel', undefined],
  // TEI.
  ['POST', '/embed', json({ inputs: '', model: EMBEDDER })],
  ['POST', '/embed', json({ inputs: 5, model: EMBEDDER })],
  ['POST', '/embed', json({ inputs: 'x', model: EMBEDDER }, { 'x-use-cache': 'maybe' })],
  ['POST', '/predict', json({ inputs: 5, model: DEFAULT_CLASSIFIER })],
  ['POST', '/predict', json({ inputs: [['a', 'b'], 'c'], model: DEFAULT_CLASSIFIER })],
  ['POST', '/rerank', json({ query: 'q', texts: [], model: RERANKER })],
  ['POST', '/embed_sparse', json({ inputs: 'x', model: EMBEDDER })],
  ['POST', '/embed_all', json({ inputs: 'x', model: EMBEDDER, prompt_name: 'no-such-prompt' })],
  // Cohere.
  ['POST', '/v2/rerank', json({ model: RERANKER, query: 'q', documents: ['a', 'b'], top_n: 1 })],
  ['POST', '/v1/rerank', json({ model: RERANKER, query: 'q', documents: [{ text: 'a' }], return_documents: true })],
  ['POST', '/v2/rerank', json({ model: RERANKER, query: 'q', documents: ['a'], top_n: 0 })],
  ['POST', '/tokenize', json({ inputs: 5, model: EMBEDDER })],
  ['POST', '/similarity', json({ inputs: { source_sentence: 'q', sentences: ['a', 'b'] }, model: EMBEDDER })],
  ['POST', '/similarity', json({ inputs: { source_sentence: 'q', sentences: [] }, model: EMBEDDER })],
  ['POST', '/decode', json({ ids: [[101, 7592, 102], []], model: EMBEDDER })],
  ['POST', '/decode', json({ ids: [1.5], model: EMBEDDER })],
  ['GET', `/info?model=${MISSING}`, undefined],
  // KServe v2.
  ['GET', '/v2', undefined],
  ['GET', '/v2/health/live', undefined],
  ['GET', '/v2/health/ready', undefined],
  ['GET', `/v2/models/${MISSING}`, undefined],
  ['GET', `/v2/models/${MISSING}/ready`, undefined],
  ['GET', `/v2/models/${EMBEDDER}/ready`, undefined],
  ['GET', `/v2/models/${EMBEDDER}/versions/1`, undefined],
  ['GET', `/v2/models/${EMBEDDER}/versions/2`, undefined],
  ['GET', `/v2/models/${EMBEDDER}/versions/1/ready`, undefined],
  [
    'POST',
    `/v2/models/${EMBEDDER}/infer`,
    json({ inputs: [{ name: 'text', shape: [1], datatype: 'FP32', data: [1] }] }),
  ],
  [
    'POST',
    `/v2/models/${EMBEDDER}/infer`,
    json({
      inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['x'] }],
      outputs: [{ name: 'embeddings', parameters: { classification: 2 } }],
    }),
  ],
  [
    'POST',
    `/v2/models/${DEFAULT_CLASSIFIER}/infer`,
    json({
      inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['x'] }],
      outputs: [{ name: 'probabilities', parameters: { classification: 1 } }],
    }),
  ],
  ['GET', '/v2/models/stats', undefined],
  ['GET', `/v2/models/${DEFAULT_CLASSIFIER}/stats`, undefined],
  ['GET', `/v2/models/${DEFAULT_CLASSIFIER}/versions/1/stats`, undefined],
  ['GET', `/v2/models/${MISSING}/stats`, undefined],
  ['GET', `/v2/models/${DEFAULT_CLASSIFIER}/config`, undefined],
  ['GET', `/v2/models/${EMBEDDER}/versions/1/config`, undefined],
  ['GET', `/v2/models/${MISSING}/config`, undefined],
  [
    'POST',
    `/v2/models/${EMBEDDER}/versions/1/infer`,
    json({ inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['hello'] }] }),
  ],
  ['POST', `/v2/models/${EMBEDDER}/versions/1/infer`, json({ inputs: [] })],
  // Cohere's embed, and the compact types on OpenAI's and TEI's routes.
  [
    'POST',
    '/v2/embed',
    json({ model: EMBEDDER, texts: ['a'], embedding_types: ['float', 'int8', 'ubinary', 'base64'] }),
  ],
  ['POST', '/v1/embed', json({ model: EMBEDDER, texts: ['a'], input_type: 'search_query' })],
  ['POST', '/v2/embed', json({ model: EMBEDDER, texts: [] })],
  ['POST', '/embed', json({ inputs: 'x', model: EMBEDDER, embedding_type: 'binary' })],
  ['POST', '/v1/embeddings', json({ model: EMBEDDER, input: 'x', encoding_format: 'int8' })],
  // Ollama.
  ['POST', '/api/embed', json({ model: EMBEDDER, input: ['a', 'b'], dimensions: 8 })],
  ['POST', '/api/embed', json({ model: MISSING, input: 'x' })],
  ['POST', '/api/embeddings', json({ model: `${EMBEDDER}:latest`, prompt: 'x' })],
  ['GET', '/api/tags', undefined],
  ['GET', '/api/version', undefined],
  // The managed platforms: SageMaker's, and Vertex AI's body.
  ['GET', '/ping', undefined],
  ['POST', '/invocations', json({ inputs: 'I like it' })],
  ['POST', '/vertex', json({ instances: [{ inputs: 'x', model: EMBEDDER }] })],
  ['POST', '/vertex', json({ instances: [] })],
  // Operations.
  ['GET', '/backlog', undefined],
  ['GET', '/ready', undefined],
  ['GET', '/openapi.json', undefined],
  ['GET', '/docs', undefined],
];

describe('the OpenAPI document', () => {
  const models = readmeModels();
  const system = new TestSystem(uniquePrefix('openapi'));
  // A second gateway, with API keys and the response cache on, over the same workers, and a model scaled to zero.
  const keyed = new TestSystem(system.prefix);
  const token = 'tsk_openapi1_secret';
  let contract: Contract;

  before(async () => {
    await system.startGateway({ DEFAULT_MODEL: models[0] });
    const hash = `sha256:${(await import('node:crypto')).createHash('sha256').update('secret').digest('hex')}`;
    // Both gateways before the workers: seven models loading at once can hold a gateway's start past its bound.
    await keyed.startGateway({
      API_KEYS: JSON.stringify({ keys: [{ id: 'openapi1', name: 'openapi', hash }] }),
      RESPONSE_CACHE_TTL_S: 600,
      MODELS: IDLE,
    });
    for (const model of models) system.startWorker({ model });
    for (const model of models) await system.waitForWorkers(model);
    await keyed.waitForWorkers(models[0]);
    contract = new Contract((await (await fetch(`${system.url}/openapi.json`)).json()) as Json);
  });
  after(async () => {
    await keyed.stop();
    await system.stop();
  });

  it('validates as OpenAPI 3.1, with keys off and on', async () => {
    for (const url of [system.url, keyed.url]) {
      const doc = (await (await fetch(`${url}/openapi.json`)).json()) as Json;
      const result = await new Validator().validate(doc);
      assert.ok(result.valid, `${url}/openapi.json: ${JSON.stringify(result.errors, null, 1)}`);
      assert.equal(doc.openapi, '3.1.0');
    }
    // Each operation has its own name, the one generated clients give the call.
    const ids = Object.values(contract.doc.paths as Json).flatMap((item) =>
      Object.values(item as Json).map((op) => (op as Json).operationId as string),
    );
    assert.ok(ids.every(Boolean) && new Set(ids).size === ids.length, `operationIds: ${ids.join(', ')}`);
    // A broken document fails the validator.
    const broken = structuredClone(contract.doc);
    broken.paths['/health'].get.responses = 'none';
    assert.equal((await new Validator().validate(broken)).valid, false);
  });

  it('describes the API keys only when keys are on', async () => {
    const on = (await (await fetch(`${keyed.url}/openapi.json`)).json()) as Json;
    assert.deepEqual(Object.keys(on.components.securitySchemes).sort(), ['apiKey', 'bearer']);
    assert.deepEqual(on.paths['/v1/embeddings'].post.security, [{ bearer: [] }, { apiKey: [] }]);
    assert.ok(on.paths['/v1/embeddings'].post.responses['401']);
    assert.equal(contract.doc.components.securitySchemes, undefined);
    assert.equal(contract.doc.paths['/v1/embeddings'].post.security, undefined);
    // The keyed gateway's answers, refused and admitted, have the shapes its document gives.
    const keyedContract = new Contract(on);
    const call = (headers: Record<string, string>) =>
      send(keyed.url, 'POST', '/v1/embeddings', json({ model: EMBEDDER, input: 'x' }, headers));
    const refused = await call({});
    assert.equal(refused.status, 401);
    keyedContract.check(refused);
    for (const headers of [{ authorization: `Bearer ${token}` }, { 'x-api-key': token }] as Array<
      Record<string, string>
    >) {
      const admitted = await call(headers);
      assert.equal(admitted.status, 200, admitted.body);
      keyedContract.check(admitted);
    }
    // A model scaled to zero: ready, and a request for it is told to come back once a worker loads it.
    const idle = [
      await send(keyed.url, 'GET', '/ready'),
      await send(keyed.url, 'GET', `/v2/models/${IDLE}/ready`),
      await send(keyed.url, 'POST', `/models/${IDLE}`, json({ inputs: 'x' }, { authorization: `Bearer ${token}` })),
    ];
    assert.deepEqual(
      idle.map((a) => a.status),
      [200, 503, 503],
      idle.map((a) => a.body).join('\n'),
    );
    assert.equal((JSON.parse(idle[0].body) as Json).models[IDLE].scaled_to_zero, true);
    for (const answer of idle) keyedContract.check(answer);
    // The second of the same request comes from the response cache, in the same shape.
    const cached = await send(
      keyed.url,
      'POST',
      '/v1/embeddings',
      json({ model: EMBEDDER, input: 'x' }, { 'x-api-key': token }),
    );
    assert.equal(cached.cache, 'hit');
    keyedContract.check(cached);
  });

  for (const { file, examples } of docExamples()) {
    describe(`the examples of ${file}`, () => {
      for (const example of examples) {
        it(`${example.where} ${example.command.split('\n')[0].slice(0, 90)}`, async () => {
          const answer = await curlExample(example, system.port);
          const path = answer.url.pathname + answer.url.search;
          contract.check({ ...answer, path });
          // The JSON body the example sends, when it sends one (-d '…' with a JSON content type).
          const sent = /-d '([^']*)'/.exec(example.command)?.[1];
          if (sent !== undefined && /content-type: application\/json/i.test(example.command) && answer.status < 300) {
            contract.checkRequest(answer.method, path, JSON.parse(sent));
          }
        });
      }
    });
  }

  describe('bad input and the routes the docs do not call', () => {
    for (const [method, path, init] of REQUESTS) {
      const headers = Object.entries(init?.headers ?? {}).filter(([name]) => name !== 'content-type');
      const shown = [
        method,
        path.slice(0, 80),
        ...headers.map(([name, value]) => `${name}: ${value}`),
        String(init?.body ?? '').slice(0, 60),
      ];
      it(shown.join(' '), async () => {
        const answer = await send(system.url, method, path, init);
        contract.check(answer);
        if (init?.headers['content-type'] === 'application/json' && answer.status < 300)
          contract.checkRequest(method, path, JSON.parse(String(init.body)));
      });
    }
  });

  it('fails an answer that drifts from the document', async () => {
    const good = await send(system.url, 'POST', '/v1/embeddings', json({ model: EMBEDDER, input: 'x' }));
    contract.check(good);
    const body = JSON.parse(good.body) as Json;
    const drift = (changed: Json) => ({ ...good, body: JSON.stringify(changed) });
    assert.throws(() => contract.check(drift({ ...body, extra: 1 })), /does not have the document's shape/);
    assert.throws(
      () => contract.check(drift({ ...body, usage: { prompt_tokens: '3' } })),
      /does not have the document's shape/,
    );
    assert.throws(() => contract.check({ ...good, status: 418 }), /status 418 is not in the document/);
    assert.throws(() => contract.check({ ...good, contentType: 'text/html' }), /answered text\/html/);
    assert.throws(
      () => contract.checkRequest('POST', '/v1/embeddings', { model: EMBEDDER, input: 5 }),
      /refuses a body/,
    );
    // A field the document does not have is allowed, as the server leaves it out (x-ignored-fields).
    contract.checkRequest('POST', '/v1/embeddings', { model: EMBEDDER, input: 'x', extra: 1 });
    assert.throws(
      () => contract.checkRequest('POST', `/models/${EMBEDDER}`, { inputs: 'x', parameters: 'sideways' }),
      /refuses a body/,
    );
    const error = await send(system.url, 'POST', '/embed', json({ inputs: 5, model: EMBEDDER }));
    assert.throws(
      () => contract.check({ ...error, body: JSON.stringify({ error: { message: 'OpenAI-shaped' } }) }),
      /does not have the document's shape/,
    );
  });

  it('serves /docs with its assets from the package', async () => {
    const page = await send(system.url, 'GET', '/docs');
    const assets = [...page.body.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => new URL(m[1], `${system.url}/docs`));
    assert.ok(
      assets.some((url) => url.pathname.endsWith('.js')) && assets.some((url) => url.pathname.endsWith('.css')),
      page.body,
    );
    for (const url of assets) {
      assert.equal(url.origin, system.url, `${url.href}: served by the gateway, not a CDN`);
      const res = await fetch(url);
      assert.equal(res.status, 200, String(url));
      assert.ok((await res.arrayBuffer()).byteLength > 0, String(url));
    }
  });

  it('shows every route in a browser at /docs, asking nothing of any other origin', { skip: noBrowser }, async () => {
    const browser = await launchBrowser();
    try {
      const page = await browser.newPage();
      const foreign = await foreignRequests(page, system.url);
      await page.goto(`${system.url}/docs`);
      // Swagger UI lists each operation as a block that names its path.
      await page.locator('.opblock').first().waitFor({ state: 'visible', timeout: 30_000 });
      const shown = await page.locator('.opblock-summary-path').allTextContents();
      const paths = Object.keys(contract.doc.paths);
      assert.deepEqual(
        paths.filter((p) => !shown.some((text) => text.replace(/\u200b/g, '') === p)),
        [],
        `paths /docs does not show; it shows ${shown.join(', ')}`,
      );
      assert.deepEqual(foreign, [], 'requests to other origins');
    } finally {
      await browser.close();
    }
  });

  it('every operation of the document was answered as it says', () => {
    const missed = contract.operations().filter((op) => !contract.seen.has(op));
    assert.deepEqual(missed, [], `operations no request reached: ${missed.join(', ')}`);
  });

  it('generates a TypeScript client whose typed calls of each protocol compile and run', async () => {
    const dir = path.join(ROOT, 'test/artifacts/openapi-client');
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(
      path.join(dir, 'schema.ts'),
      astToString(await openapiTS(contract.doc as Parameters<typeof openapiTS>[0])),
    );
    fs.writeFileSync(path.join(dir, 'calls.ts'), clientCalls(EMBEDDER, DEFAULT_CLASSIFIER));
    const program = ts.createProgram([path.join(dir, 'calls.ts')], {
      strict: true,
      noEmit: true,
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      skipLibCheck: true,
      allowImportingTsExtensions: true,
      types: [],
      lib: ['lib.es2022.d.ts', 'lib.dom.d.ts'],
    });
    const diagnostics = ts
      .getPreEmitDiagnostics(program)
      .map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    assert.deepEqual(diagnostics, [], 'the typed calls compile against the generated types');
    const { callEach } = (await import(pathToFileURL(path.join(dir, 'calls.ts')).href)) as {
      callEach: (base: string) => Promise<Record<string, number>>;
    };
    const results = await callEach(system.url);
    assert.deepEqual(results, { inference: 200, openai: 200, tei: 200, kserve: 200, health: 200 });
  });
});

/**
 * A typed call of each protocol with the generated types. The `@ts-expect-error` lines are calls
 * the document forbids: were the types loose (`any`), each would be an unused directive, an error.
 */
function clientCalls(embedder: string, classifier: string): string {
  return `import createClient from 'openapi-fetch';
import type { paths } from './schema.ts';

export async function callEach(baseUrl: string): Promise<Record<string, number>> {
  const client = createClient<paths>({ baseUrl });
  const inference = await client.POST('/models/{model}', {
    params: { path: { model: ${JSON.stringify(classifier)} }, header: { 'x-wait-for-model': 'true' } },
    body: { inputs: 'I love this movie', parameters: { top_k: 2 } },
  });
  // @ts-expect-error inputs is required
  void client.POST('/models/{model}', { params: { path: { model: 'x' } }, body: { parameters: {} } });

  const openai = await client.POST('/v1/embeddings', { body: { model: ${JSON.stringify(embedder)}, input: ['one', 'two'], dimensions: 8 } });
  const embedding: number[] | string | undefined = openai.data?.data[0].embedding;
  // @ts-expect-error input is text, never token ids
  void client.POST('/v1/embeddings', { body: { model: 'x', input: 42 } });

  const tei = await client.POST('/embed', { body: { inputs: 'hello', model: ${JSON.stringify(embedder)} } });
  const vectors: number[][] | undefined = tei.data;
  const teiError: string | undefined = tei.error?.error_type;

  const kserve = await client.POST('/v2/models/{model}/infer', {
    params: { path: { model: ${JSON.stringify(classifier)} } },
    body: { inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['great'] }], outputs: [{ name: 'probabilities' }] },
  });
  // JSON unless binary outputs were asked for: the answer is one or the other.
  const outputs = typeof kserve.data === 'object' ? kserve.data.outputs.map((o) => o.name) : undefined;

  const health = await client.GET('/health');
  const status: 'ok' | undefined = health.data?.status;
  void [embedding, vectors, teiError, outputs, status];
  return {
    inference: inference.response.status,
    openai: openai.response.status,
    tei: tei.response.status,
    kserve: kserve.response.status,
    health: health.response.status,
  };
}
`;
}
