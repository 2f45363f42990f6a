import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pairLengths, windows } from '../../apps/worker/src/model/truncation.ts';
import { entailmentId, taskFromConfig, tasksServed } from '../../apps/worker/src/model/detect.ts';
import { sequencesOf, taskOfInputs, parameterSchemas } from '@tserve/contract';

describe('pairLengths (how a pair is cut to fit)', () => {
  it('keeps a pair that fits, and cuts longest_first as the tokenizers library does', () => {
    assert.deepEqual(pairLengths(10, 20, 40, 'longest_first'), [10, 20]);
    // Only the longer one is cut when the shorter fits in half.
    assert.deepEqual(pairLengths(10, 50, 40, 'longest_first'), [10, 30]);
    assert.deepEqual(pairLengths(50, 10, 40, 'longest_first'), [30, 10]);
    // Both too long: each keeps half, the odd token going to the second.
    assert.deepEqual(pairLengths(30, 30, 41, 'longest_first'), [20, 21]);
  });

  it('cuts only the named text, and refuses when that cannot be enough', () => {
    assert.deepEqual(pairLengths(50, 10, 40, 'only_first'), [30, 10]);
    assert.equal(pairLengths(10, 50, 40, 'only_first'), undefined);
    assert.deepEqual(pairLengths(10, 50, 40, 'only_second'), [10, 30]);
  });
});

describe('windows (a long context read in overlapping spans)', () => {
  it('steps by size less overlap until the last window reaches the end', () => {
    assert.deepEqual(windows(10, 20, 5), [0]);
    assert.deepEqual(windows(20, 20, 5), [0]);
    assert.deepEqual(windows(21, 20, 5), [0, 15]);
    assert.deepEqual(windows(600, 376, 128), [0, 248]);
    assert.deepEqual(windows(700, 376, 128), [0, 248, 496]);
  });
});

describe('task detection from config.json', () => {
  const nli = {
    architectures: ['BertForSequenceClassification'],
    label2id: { contradiction: 0, neutral: 1, entailment: 2 },
  };
  it('reads the architecture, and an entailment label makes a classifier an NLI model', () => {
    assert.equal(
      taskFromConfig({ architectures: ['BertForSequenceClassification'], id2label: { 0: 'NEGATIVE', 1: 'POSITIVE' } }),
      'text-classification',
    );
    assert.equal(taskFromConfig(nli), 'zero-shot-classification');
    assert.equal(entailmentId(nli), 2);
    assert.equal(taskFromConfig({ architectures: ['BertForQuestionAnswering'] }), 'question-answering');
    assert.equal(taskFromConfig({ architectures: ['BertModel'] }), 'feature-extraction');
    assert.equal(taskFromConfig({ architectures: ['T5ForConditionalGeneration'] }), undefined);
  });
  it('lists what else the same outputs serve', () => {
    assert.deepEqual(tasksServed('feature-extraction', {}), ['feature-extraction', 'sentence-similarity']);
    assert.deepEqual(tasksServed('zero-shot-classification', nli), ['zero-shot-classification', 'text-classification']);
    assert.deepEqual(tasksServed('question-answering', {}), ['question-answering']);
  });
});

describe('what a request costs, and which task its inputs name', () => {
  it('counts a sequence per label, per sentence and source, one per other input', () => {
    const zs = parameterSchemas['zero-shot-classification'].parse({ candidate_labels: 'a, b,c' });
    assert.deepEqual(zs.candidate_labels, ['a', 'b', 'c']);
    assert.equal(sequencesOf('zero-shot-classification', 'text', zs), 3);
    assert.equal(sequencesOf('sentence-similarity', { source_sentence: 'a', sentences: ['b', 'c'] }, {}), 3);
    assert.equal(sequencesOf('text-classification', { text: 'a', text_pair: 'b' }, {}), 1);
  });
  it('reads the task from the shape of the inputs', () => {
    assert.equal(taskOfInputs({ question: 'q', context: 'c' }), 'question-answering');
    assert.equal(taskOfInputs([{ text: 'a', text_pair: 'b' }]), 'text-classification');
    assert.equal(taskOfInputs({ source_sentence: 'a', sentences: [] }), 'sentence-similarity');
    assert.equal(taskOfInputs('text'), undefined);
  });
});
