import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import {
  describeIssues,
  inferenceRequestSchema,
  parameterSchemas,
  parseLenient,
  taskInputSchemas,
} from '@tserve/contract';

describe('lenient parsing: unknown fields left out and named, known ones checked', () => {
  it('parses a body without unknown fields as safeParse does, naming none', () => {
    const parsed = parseLenient(inferenceRequestSchema, { inputs: 'x', options: { wait_for_model: true } });
    assert.deepEqual(parsed, {
      success: true,
      data: { inputs: 'x', options: { wait_for_model: true } },
      ignored: [],
    });
  });

  it("leaves out Weaviate's options and vendor fields at any depth, naming each by its path", () => {
    const body = {
      inputs: ['a'],
      options: { wait_for_model: true, use_gpu: false, use_cache: true },
      extra_body: { x: 1 },
    };
    const parsed = parseLenient(inferenceRequestSchema, body);
    assert.ok(parsed.success);
    assert.deepEqual(parsed.data, { inputs: ['a'], options: { wait_for_model: true, use_cache: true } });
    assert.deepEqual(parsed.ignored.sort(), ['extra_body', 'options.use_gpu']);
    assert.deepEqual(
      body.options,
      { wait_for_model: true, use_gpu: false, use_cache: true },
      'the body is not changed',
    );
  });

  it('finds the unknown fields of the union member a list item meant', () => {
    const parsed = parseLenient(taskInputSchemas['text-classification'], [
      'plain',
      { text: 'a', text_pair: 'b', label: 'x' },
    ]);
    assert.ok(parsed.success);
    assert.deepEqual(parsed.data, ['plain', { text: 'a', text_pair: 'b' }]);
    assert.deepEqual(parsed.ignored, ['1.label']);
  });

  it('still refuses a known field with a bad value, saying only what is wrong with it', () => {
    const parsed = parseLenient(parameterSchemas['text-classification'], { top_k: 'three', temperature: 1 });
    assert.ok(!parsed.success);
    assert.equal(
      describeIssues(parsed.error, 'parameters'),
      'parameters.top_k: Invalid input: expected number, received string',
    );
    assert.deepEqual(parsed.ignored, ['temperature']);
  });

  it('never reads a field it left out, whatever its name', () => {
    const body = JSON.parse('{"inputs": "x", "__proto__": {"polluted": true}, "constructor": 1}');
    const parsed = parseLenient(inferenceRequestSchema, body);
    assert.ok(parsed.success);
    assert.deepEqual(parsed.data, { inputs: 'x' });
    assert.deepEqual(parsed.ignored.sort(), ['__proto__', 'constructor']);
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  });

  it('refuses what is not an object where one is needed, as before', () => {
    const parsed = parseLenient(z.object({ a: z.number() }).strict(), 'text');
    assert.ok(!parsed.success);
    assert.deepEqual(parsed.ignored, []);
  });
});
