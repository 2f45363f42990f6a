import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  answerKind,
  answerLine,
  endpointAllowed,
  errorLine,
  expiredLine,
  lineId,
  parseLine,
  windowSeconds,
} from '../../apps/gateway/src/offline/batch-lines.ts';

const line = (fields: Record<string, unknown>) =>
  JSON.stringify({ custom_id: 'a', method: 'POST', url: '/v1/embeddings', body: { input: 'x' }, ...fields });

describe("a batch's lines", () => {
  it('takes a request line whose url is the batch endpoint, its body as the route will read it', () => {
    assert.deepEqual(parseLine(line({}), '/v1/embeddings'), {
      custom_id: 'a',
      url: '/v1/embeddings',
      body: '{"input":"x"}',
    });
  });

  it("knows a line's model from its endpoint or its body", () => {
    const body = { model: 'replica/e', input: 'x' };
    assert.equal((parseLine(line({ body }), '/v1/embeddings') as { model?: string }).model, 'replica/e');
    const path = line({ url: '/models/replica/c', body: { inputs: 'x' } });
    assert.equal((parseLine(path, '/models/replica/c') as { model?: string }).model, 'replica/c');
  });

  it('refuses each malformed line with a code and its custom_id where it had one', () => {
    const cases: Array<[string, string | null, string, RegExp]> = [
      ['{"custom_id": "a",', null, 'invalid_json', /not JSON/],
      ['[1, 2]', null, 'invalid_line', /not a JSON object/],
      [line({ custom_id: '' }), null, 'invalid_line', /custom_id/],
      [line({ custom_id: 7 }), null, 'invalid_line', /custom_id/],
      [line({ method: 'GET' }), 'a', 'invalid_line', /method must be "POST"/],
      [line({ url: '/v1/chat/completions' }), 'a', 'invalid_url', /not the batch's endpoint \/v1\/embeddings/],
      [line({ url: 3 }), 'a', 'invalid_line', /url must be a string/],
      [line({ body: 'text' }), 'a', 'invalid_line', /body must be a JSON object/],
      [line({ body: ['x'] }), 'a', 'invalid_line', /body must be a JSON object/],
    ];
    for (const [text, customId, code, message] of cases) {
      const refusal = parseLine(text, '/v1/embeddings');
      assert.ok('code' in refusal, text);
      assert.equal(refusal.custom_id, customId, text);
      assert.equal(refusal.code, code, text);
      assert.match(refusal.message, message, text);
    }
  });

  it('writes answer lines as OpenAI does, a JSON body as it came and any other as a string', () => {
    const body = Buffer.from('{"x": [1,2], "é": "ü"}');
    const answer = answerLine('batch_req_1', 'a', { status: 200, requestId: 'r', body, json: true });
    assert.deepEqual(JSON.parse(answer.toString()), {
      id: 'batch_req_1',
      custom_id: 'a',
      response: { status_code: 200, request_id: 'r', body: { x: [1, 2], é: 'ü' } },
      error: null,
    });
    const text = Buffer.from('bad "gateway"');
    const line = answerLine('batch_req_2', null, { status: 502, requestId: null, body: text, json: false });
    assert.equal(JSON.parse(line.toString()).response.body, 'bad "gateway"');
    assert.deepEqual(JSON.parse(errorLine('batch_req_3', 'b', 'batch_expired', 'late')), {
      id: 'batch_req_3',
      custom_id: 'b',
      response: null,
      error: { code: 'batch_expired', message: 'late' },
    });
    // What Redis joins around each unrun line's index as an expired batch ends is its error line.
    const { head, tail } = expiredLine('batch-4f2a');
    assert.deepEqual(JSON.parse(`${head}17${tail}`), {
      id: lineId('batch-4f2a', 17),
      custom_id: null,
      response: null,
      error: { code: 'batch_expired', message: 'the batch expired before this line ran' },
    });
  });

  it('sends again what was shed, over quota or timed out; keeps every other answer', () => {
    assert.deepEqual([200, 204, 400, 403, 404, 413, 422, 429, 500, 503, 504].map(answerKind), [
      'ok',
      'ok',
      'failed',
      'failed',
      'failed',
      'failed',
      'failed',
      'retry',
      'failed',
      'retry',
      'retry',
    ]);
  });

  it('reads completion windows and knows the endpoints a batch may target', () => {
    assert.deepEqual(['24h', '10m', '30s', '0h', '24', '1d', 'h'].map(windowSeconds), [
      86_400,
      600,
      30,
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
    for (const ok of ['/v1/embeddings', '/models/replica/x', '/', '/rerank', '/v2/rerank', '/embed_sparse'])
      assert.ok(endpointAllowed(ok), ok);
    for (const no of ['/v1/chat/completions', '/v1/files', '/models/', '/metrics', 'v1/embeddings'])
      assert.ok(!endpointAllowed(no), no);
  });
});
