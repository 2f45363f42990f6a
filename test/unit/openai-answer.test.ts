import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { floatAnswer } from '../../apps/gateway/src/protocols/openai.ts';

describe("OpenAI's float embeddings written from their workers' JSON", () => {
  it('are the bytes res.json writes for the same answer', () => {
    const embeddings = [
      [0.1, -2.5e-7, 3],
      [1e21, -0, 0.30000000000000004],
    ];
    const model = 'org/model "quoted" 日本';
    const written = floatAnswer(
      embeddings.map((e) => Buffer.from(JSON.stringify(e))),
      model,
      12,
    );
    const expected = {
      object: 'list',
      data: embeddings.map((embedding, index) => ({ object: 'embedding', index, embedding })),
      model,
      usage: { prompt_tokens: 12, total_tokens: 12 },
    };
    assert.equal(written.toString('utf8'), JSON.stringify(expected));
  });

  it('make an empty list when no input was sent', () => {
    assert.deepEqual(JSON.parse(floatAnswer([], 'm', 0).toString('utf8')), {
      object: 'list',
      data: [],
      model: 'm',
      usage: { prompt_tokens: 0, total_tokens: 0 },
    });
  });
});
