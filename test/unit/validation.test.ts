import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { z } from 'zod';
import {
  describeIssues,
  inferenceRequestSchema,
  parameterSchemas,
  sequencesOf,
  taskInputSchemas,
  taskOfInputs,
} from '@tserve/contract';

/** The sentence a client gets for a body the schema refuses; fails the test if the schema accepts it. */
function refusal(schema: z.ZodType, value: unknown, prefix?: string): string {
  const parsed = schema.safeParse(value);
  assert.ok(!parsed.success, `accepted ${JSON.stringify(value)}`);
  return describeIssues(parsed.error, prefix);
}

function accepted<T extends z.ZodType>(schema: T, value: unknown): z.output<T> {
  const parsed = schema.safeParse(value);
  assert.ok(parsed.success, parsed.success ? '' : describeIssues(parsed.error));
  return parsed.data;
}

describe('request validation', () => {
  it('takes an Inference API body and leaves inputs to the task', () => {
    assert.deepEqual(
      accepted(inferenceRequestSchema, { inputs: 'hi', options: { timeout_ms: 50, priority: 'batch' } }),
      {
        inputs: 'hi',
        options: { timeout_ms: 50, priority: 'batch' },
      },
    );
    assert.equal(refusal(inferenceRequestSchema, {}), 'inputs: inputs is required');
  });

  it('names unknown fields instead of dropping them', () => {
    assert.equal(
      refusal(inferenceRequestSchema, { inputs: 'x', foo: 1, bar: 2 }),
      'body: unknown field(s) "foo", "bar"',
    );
    assert.equal(
      refusal(parameterSchemas['text-classification'], { topk: 1 }, 'parameters'),
      'parameters: unknown field(s) "topk"',
    );
  });

  it('says where a nested field is wrong, under the prefix it is given', () => {
    assert.match(
      refusal(inferenceRequestSchema, { inputs: 'x', options: { timeout_ms: 0 } }),
      /^options\.timeout_ms: /,
    );
    assert.match(
      refusal(inferenceRequestSchema, { inputs: 'x', options: { priority: 'urgent' } }),
      /^options\.priority: .*"interactive"\|"batch"/,
    );
    assert.match(refusal(parameterSchemas['text-classification'], { top_k: 0 }, 'parameters'), /^parameters\.top_k: /);
  });

  it('reports the item of a list that is wrong, not only that no shape fitted', () => {
    assert.equal(
      refusal(taskInputSchemas['feature-extraction'], ['a', 5], 'inputs'),
      'inputs.1: each input must be a string',
    );
    assert.equal(
      refusal(taskInputSchemas['text-classification'], [{ text: 'a', text_pair: '' }], 'inputs'),
      'inputs.0.text_pair: text_pair must not be empty',
    );
    assert.equal(
      refusal(taskInputSchemas['question-answering'], { question: 'q' }, 'inputs'),
      'inputs.context: context is required',
    );
  });

  it('describes the accepted shapes when the inputs fit none', () => {
    assert.equal(
      refusal(taskInputSchemas['text-classification'], 5, 'inputs'),
      'inputs: inputs must be a non-empty string or {"text", "text_pair"} or a list of them',
    );
    assert.equal(refusal(taskInputSchemas['fill-mask'], [], 'inputs'), 'inputs: inputs must not be an empty list');
    assert.equal(
      refusal(taskInputSchemas['sentence-similarity'], { source_sentence: 's', sentences: [] }, 'inputs'),
      'inputs.sentences: sentences must not be empty',
    );
  });

  it('reads zero-shot candidate labels as a list or one comma-separated string', () => {
    assert.deepEqual(
      accepted(parameterSchemas['zero-shot-classification'], { candidate_labels: 'a, b,,c' }).candidate_labels,
      ['a', 'b', 'c'],
    );
    assert.equal(
      refusal(parameterSchemas['zero-shot-classification'], {}, 'parameters'),
      'parameters.candidate_labels: candidate_labels is required',
    );
    assert.equal(
      refusal(parameterSchemas['zero-shot-classification'], { candidate_labels: ' , ' }, 'parameters'),
      'parameters.candidate_labels: give at least one candidate label',
    );
    assert.match(
      refusal(
        parameterSchemas['zero-shot-classification'],
        { candidate_labels: ['a'], hypothesis_template: 'x' },
        'parameters',
      ),
      /must contain "\{\}"/,
    );
  });

  it("tells the task from the inputs' shape, and plain texts from none", () => {
    assert.equal(taskOfInputs([{ source_sentence: 's', sentences: ['t'] }]), 'sentence-similarity');
    assert.equal(taskOfInputs({ question: 'q', context: 'c' }), 'question-answering');
    assert.equal(taskOfInputs({ text: 'a', text_pair: 'b' }), 'text-classification');
    assert.equal(taskOfInputs(['a', 'b']), undefined);
  });

  it('counts the model sequences an input costs', () => {
    assert.equal(sequencesOf('text-classification', 'a', {}), 1);
    assert.equal(sequencesOf('zero-shot-classification', 'a', { candidate_labels: ['x', 'y', 'z'] }), 3);
    assert.equal(sequencesOf('sentence-similarity', { source_sentence: 's', sentences: ['a', 'b'] }, {}), 3);
  });
});
