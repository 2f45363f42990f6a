import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { linesOf } from '../../apps/gateway/src/protocols/openai-files.ts';

async function lines(chunks: Buffer[], truncated = false): Promise<string[]> {
  const stream = Object.assign(Readable.from(chunks), { truncated });
  const got: string[] = [];
  for await (const line of linesOf(stream, 1_000_000)) got.push(line);
  return got;
}

describe("an uploaded file's lines", () => {
  it('splits on LF and CRLF wherever the chunks break, a character cut across two chunks included', async () => {
    const text = Buffer.from('{"a": "é"}\r\n\n{"b": 2}\nlast');
    for (let cut = 1; cut < text.length; cut++)
      assert.deepEqual(await lines([text.subarray(0, cut), text.subarray(cut)]), [
        '{"a": "é"}',
        '',
        '{"b": 2}',
        'last',
      ]);
  });

  it('gives a line that spans many chunks once, whole', async () => {
    const long = 'x'.repeat(100_000);
    const text = Buffer.from(`a\n${long}\nb\n`);
    const chunks = Array.from({ length: Math.ceil(text.length / 1000) }, (_, i) =>
      text.subarray(i * 1000, (i + 1) * 1000),
    );
    assert.deepEqual(await lines(chunks), ['a', long, 'b']);
  });

  it('refuses a file the multipart parser cut at FILES_MAX_MB', async () => {
    await assert.rejects(lines([Buffer.from('a\nb')], true), /larger than 1 MB \(FILES_MAX_MB\)/);
  });
});
