import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ApiError } from '@tserve/contract';
import { readInferBody, writeInferResponse } from '../../apps/gateway/src/protocols/kserve-binary.ts';
import { binaryRequest, bytesTensor } from '../helpers/triton.ts';

const rejects = (fn: () => unknown, message: RegExp) =>
  assert.throws(fn, (err: unknown) => err instanceof ApiError && err.status === 400 && message.test(err.message));

describe('readInferBody: a v2 request in JSON or with binary tensors', () => {
  it('reads an all-JSON body as it is', () => {
    const request = { inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['x'] }] };
    assert.deepEqual(readInferBody(Buffer.from(JSON.stringify(request)), undefined), request);
  });

  it("puts a binary BYTES input's elements in its data, in order, and drops binary_data_size", () => {
    const first = bytesTensor(['Zoë 😀', 'second text']);
    const second = bytesTensor(['other']);
    const [body, length] = binaryRequest(
      {
        inputs: [
          { name: 'text', shape: [2], datatype: 'BYTES', parameters: { binary_data_size: first.length } },
          { name: 'more', shape: [1], datatype: 'BYTES', parameters: { binary_data_size: second.length, other: 1 } },
        ],
        parameters: { binary_data_output: true },
      },
      first,
      second,
    );
    assert.deepEqual(readInferBody(body, length), {
      inputs: [
        { name: 'text', shape: [2], datatype: 'BYTES', parameters: {}, data: ['Zoë 😀', 'second text'] },
        { name: 'more', shape: [1], datatype: 'BYTES', parameters: { other: 1 }, data: ['other'] },
      ],
      parameters: { binary_data_output: true },
    });
  });

  it('leaves a binary tensor of another datatype without elements, for the route to refuse by its datatype', () => {
    const [body, length] = binaryRequest(
      { inputs: [{ name: 'x', shape: [1], datatype: 'FP32', parameters: { binary_data_size: 4 } }] },
      Buffer.alloc(4),
    );
    assert.deepEqual(readInferBody(body, length), {
      inputs: [{ name: 'x', shape: [1], datatype: 'FP32', parameters: {}, data: [] }],
    });
  });

  it('refuses what does not add up, saying what', () => {
    const text = (size: number) => ({
      inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', parameters: { binary_data_size: size } }],
    });
    const tensor = bytesTensor(['abc']);
    const [whole] = binaryRequest(text(tensor.length), tensor);
    rejects(() => readInferBody(whole, '9999'), /at most the body's \d+ bytes, not 9999/);
    rejects(() => readInferBody(whole, 'ten'), /Inference-Header-Content-Length/);
    rejects(
      () => readInferBody(...binaryRequest(text(tensor.length + 1), tensor)),
      /binary_data_size is 8 bytes but 7 follow/,
    );
    rejects(
      () => readInferBody(...binaryRequest(text(tensor.length - 1), tensor)),
      /7 bytes follow the JSON header but the inputs' binary_data_size add up to 6/,
    );
    rejects(
      () => readInferBody(...binaryRequest(text(2), tensor.subarray(0, 2))),
      /ends inside the length of element 0/,
    );
    rejects(() => readInferBody(...binaryRequest(text(6), tensor.subarray(0, 6))), /element 0 is 3 bytes but 2 remain/);
    const latin1 = bytesTensor([Buffer.from([0xe9])]);
    rejects(() => readInferBody(...binaryRequest(text(latin1.length), latin1)), /element 0 is not valid UTF-8/);
    rejects(() => readInferBody(...binaryRequest(text(-1))), /binary_data_size must be a non-negative integer/);
    const both = {
      inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['x'], parameters: { binary_data_size: 0 } }],
    };
    rejects(() => readInferBody(...binaryRequest(both)), /in data or as binary data, not both/);
    rejects(() => readInferBody(Buffer.from('{"inputs": ['), '4'), /malformed JSON/);
    rejects(() => readInferBody(Buffer.alloc(0), undefined), /empty/);
  });
});

describe('writeInferResponse', () => {
  const response = {
    model_name: 'm',
    outputs: [
      { name: 'probabilities', datatype: 'FP32' as const, shape: [1, 2], data: [0.25, 0.75] },
      { name: 'logits', datatype: 'FP32' as const, shape: [1, 2], data: [-1.5, 0.1] },
    ],
  };

  it('is plain JSON when no output goes as binary', () => {
    const { body, headerLength } = writeInferResponse(response, () => false);
    assert.equal(headerLength, undefined);
    assert.deepEqual(JSON.parse(body.toString()), response);
  });

  it('puts the binary outputs after the JSON header, as little-endian FP32, and sizes them there', () => {
    const { body, headerLength } = writeInferResponse(response, (name) => name === 'logits');
    assert.ok(headerLength !== undefined);
    const header = JSON.parse(body.subarray(0, headerLength).toString());
    assert.deepEqual(header.outputs, [
      response.outputs[0],
      { name: 'logits', datatype: 'FP32', shape: [1, 2], parameters: { binary_data_size: 8 } },
    ]);
    const binary = body.subarray(headerLength);
    assert.equal(binary.length, 8);
    assert.deepEqual([binary.readFloatLE(0), binary.readFloatLE(4)], [-1.5, Math.fround(0.1)]);
  });
});
