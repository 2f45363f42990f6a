import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  encodeRecordedOutcome,
  encodeResultMessage,
  readResultMessage,
  type JobOutcome,
  type JobsTaken,
} from '@tserve/contract';

const timing = { queue_ms: 1, inference_ms: 2, batch_size: 3 };
const outcome: JobOutcome = {
  kind: 'outcome',
  job: 'j1',
  model: 'org/model',
  outcomes: [
    {
      id: 'a',
      ok: true,
      outputs: [
        [
          [0.1, -2.5e-7],
          [3, 4],
        ],
        [[5, 6]],
      ],
      warnings: ['cut'],
      timing,
      tokens: [3, 4],
    },
    { id: 'b', ok: false, error: { error: 'too long', error_type: 'validation' } },
    // Text of several bytes a character, and a newline inside a string: lengths are bytes, and the first newline byte ends the head.
    { id: 'c', ok: true, outputs: [[{ label: '日本\n語', score: 0.5 }], []], warnings: [], timing },
    { id: 'd', ok: true, outputs: [], warnings: [], timing },
  ],
};

const record = () => {
  const read = readResultMessage(encodeRecordedOutcome(outcome));
  assert.ok(read?.kind === 'outcome');
  return read;
};

describe('recorded outcomes', () => {
  it('read back as the outcome recorded, every output parsed when read', () => {
    const read = record();
    const plain = { ...read, outcomes: read.outcomes.map(({ outputsJson: _json, ...rest }) => ({ ...rest })) };
    assert.deepEqual(plain, outcome);
  });

  it("hold each output's JSON as JSON.stringify writes it, so a gateway may write it unparsed", () => {
    const read = record();
    const json = (i: number) => read.outcomes[i].outputsJson?.map((part) => part.toString('utf8'));
    assert.deepEqual(json(0), ['[[0.1,-2.5e-7],[3,4]]', '[[5,6]]']);
    assert.equal(json(1), undefined, 'a failure has no outputs');
    assert.deepEqual(json(2), [JSON.stringify([{ label: '日本\n語', score: 0.5 }]), '[]']);
    assert.deepEqual(json(3), []);
  });

  it('keep out of the head what the outputs hold', () => {
    const bytes = encodeRecordedOutcome(outcome);
    const head = bytes.toString('utf8', 0, bytes.indexOf(10));
    assert.doesNotMatch(head, /日本|0\.1/);
    assert.ok(head.length < 600);
  });
});

describe('result messages', () => {
  it('read a published outcome as its record, the outputs as the worker wrote them', () => {
    assert.deepEqual(encodeResultMessage(outcome), encodeRecordedOutcome(outcome));
    const read = readResultMessage(encodeResultMessage(outcome));
    assert.ok(read?.kind === 'outcome');
    assert.deepEqual(
      read.outcomes[0].outputsJson?.map((part) => part.toString('utf8')),
      ['[[0.1,-2.5e-7],[3,4]]', '[[5,6]]'],
    );
  });

  it('read the messages of other kinds as their JSON', () => {
    const taken: JobsTaken = { kind: 'taken', jobs: ['j1', 'j2'] };
    assert.deepEqual(readResultMessage(encodeResultMessage(taken)), taken);
  });

  it('are refused where the outputs do not add up to what follows the head, or the head is no message', () => {
    const bytes = encodeResultMessage(outcome);
    assert.equal(readResultMessage(bytes.subarray(0, bytes.length - 1)), undefined, 'cut short');
    assert.equal(readResultMessage(Buffer.concat([bytes, Buffer.from(' ')])), undefined, 'a byte too many');
    assert.equal(readResultMessage(bytes.subarray(0, bytes.indexOf(10))), undefined, 'the head alone');
    assert.equal(readResultMessage(Buffer.from('{"kind":"outcome","job":"j1"}\n')), undefined, 'not of the shape');
    assert.equal(readResultMessage(Buffer.from('not json')), undefined);
  });
});
