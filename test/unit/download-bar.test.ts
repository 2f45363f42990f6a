import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { downloadBar, readableMessage } from '@tserve/telemetry';

describe('a download as a bar', () => {
  it('fills the bar by its share, and says its size, rate and time left in units a person reads', () => {
    assert.equal(
      downloadBar({
        file: 'onnx/model.onnx',
        bytes: 98_200_000,
        totalBytes: 190_000_000,
        bytesPerSecond: 11_300_000,
        etaSeconds: 8.1,
      }),
      'downloading onnx/model.onnx [████████████░░░░░░░░░░░░]  51%  98.2 MB of 190.0 MB  11.3 MB/s  8 s left',
    );
    assert.match(
      downloadBar({ file: 'f', bytes: 2_500_000_000, totalBytes: 2_500_000_000, bytesPerSecond: 950, etaSeconds: 0 }),
      /\[█{24}\] 100% {2}2\.5 GB of 2\.5 GB {2}950 B\/s {2}0 s left$/,
    );
    assert.match(
      downloadBar({ file: 'f', bytes: 1_000, totalBytes: 10_000_000, bytesPerSecond: 1_000, etaSeconds: 9_999 }),
      /\[░{24}\] {3}0% {2}1\.0 kB of 10\.0 MB {2}1\.0 kB\/s {2}2 h 46 min left$/,
    );
  });

  it('where the size or the rate is not known yet, says so rather than guess', () => {
    assert.equal(
      downloadBar({ file: 'tokenizer.json', bytes: 0, totalBytes: 0, bytesPerSecond: 0 }),
      'downloading tokenizer.json [░░░░░░░░░░░░░░░░░░░░░░░░]   0%  0 B  0 B/s  time left unknown',
    );
  });

  it("keeps a download's fields on its other lines at a terminal: a resumed download names its file", () => {
    assert.equal(
      readableMessage({ msg: 'download interrupted; resuming', file: 'onnx/model.onnx', attempt: 2 }, 'msg'),
      'download interrupted; resuming (file="onnx/model.onnx")',
    );
    assert.equal(readableMessage({ msg: 'worker ready', queue: 'q' }, 'msg'), 'worker ready');
    assert.match(
      readableMessage({ msg: 'downloading', file: 'f', bytes: 1, totalBytes: 2, bytesPerSecond: 1 }, 'msg'),
      /^downloading f \[/,
    );
  });
});
