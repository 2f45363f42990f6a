/**
 * The int8-row rewrite on small graphs built here and run by ONNX Runtime: from fp32 weights and
 * from a per-tensor q8 graph as ONNX Runtime's quantize_dynamic writes it, each answer is near the
 * float one, and a row's answer is the same alone and beside a row a thousand times larger.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import ort from 'onnxruntime-node';
import { out, type Field } from '../../apps/worker/src/model/int8-row/protobuf.ts';
import {
  initializer,
  parseModel,
  serializeModel,
  TensorType,
  type OnnxNode,
} from '../../apps/worker/src/model/int8-row/onnx.ts';
import {
  quantizeColumns,
  RewriteError,
  rowsFromFp32,
  rowsFromQ8,
} from '../../apps/worker/src/model/int8-row/rewrite.ts';
import { int8RowWeights } from '../../apps/worker/src/model/int8-row/index.ts';
import { dropSoftmaxNanGuards } from '../../apps/worker/src/model/int8-row/nan-guards.ts';

const K = 16;
const N = 8;

/** Deterministic values in [-1, 1). */
function values(count: number, seed: number): Float32Array {
  let s = seed;
  return Float32Array.from({ length: count }, () => {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    return (s / 2 ** 31) * 2 - 1;
  });
}
const WEIGHT = values(K * N, 7);

/** A float tensor's ValueInfoProto: [rows (named), `width`]. */
function valueInfo(name: string, width: number): Field[] {
  const dims = [out.message(1, [out.string(2, 'rows')]), out.message(1, [out.int(1, width)])];
  const tensorType = out.message(1, [out.int(1, TensorType.FLOAT), out.message(2, dims)]);
  return [out.string(1, name), out.message(2, [tensorType])];
}

/** A model of `nodes` from x [rows, K] to y [rows, N]. */
function model(nodes: OnnxNode[], inits: ReturnType<typeof initializer>[], opset = 17): Uint8Array {
  const bytes = serializeModel({
    fields: [out.int(1, 8), out.message(8, [out.string(1, ''), out.int(2, opset)])],
    graphFields: [out.string(2, 'test'), out.message(11, valueInfo('x', K)), out.message(12, valueInfo('y', N))],
    valueInfo: new Map(),
    nodes,
    initializers: inits,
    inputs: new Set(['x']),
    opset,
  });
  return bytes;
}

const node = (opType: string, inputs: string[], outputs: string[], attributes?: OnnxNode['attributes']): OnnxNode => ({
  opType,
  domain: '',
  name: outputs[0],
  inputs,
  outputs,
  ...(attributes ? { attributes } : {}),
});

const floatModel = (opset?: number) =>
  model(
    [node('MatMul', ['x', 'w'], ['y'])],
    [initializer('w', TensorType.FLOAT, [K, N], new Uint8Array(WEIGHT.buffer))],
    opset,
  );

/** What ONNX Runtime's quantize_dynamic writes for y = x·w: w int8 per tensor, x quantized per call. */
function q8Model(): { bytes: Uint8Array; dequantized: Float32Array } {
  const scale = Math.max(...WEIGHT.map(Math.abs)) / 127;
  const q = Int8Array.from(WEIGHT, (v) => Math.round(v / scale));
  const nodes = [
    node('DynamicQuantizeLinear', ['x'], ['x_q', 'x_scale', 'x_zero']),
    node('MatMulInteger', ['x_q', 'w_q', 'x_zero', 'w_zero'], ['product']),
    node('Cast', ['product'], ['float'], [{ name: 'to', int: TensorType.FLOAT }]),
    node('Mul', ['x_scale', 'w_scale'], ['scale']),
    node('Mul', ['float', 'scale'], ['y']),
  ];
  const inits = [
    initializer('w_q', TensorType.INT8, [K, N], new Uint8Array(q.buffer)),
    initializer('w_zero', TensorType.INT8, [], Uint8Array.of(0)),
    initializer('w_scale', TensorType.FLOAT, [], new Uint8Array(Float32Array.of(scale).buffer)),
  ];
  return { bytes: model(nodes, inits), dequantized: Float32Array.from(q, (v) => v * Math.fround(scale)) };
}

async function run(bytes: Uint8Array, rows: Float32Array[]): Promise<Float32Array[]> {
  const session = await ort.InferenceSession.create(bytes, { intraOpNumThreads: 1 });
  const x = new Float32Array(rows.length * K);
  rows.forEach((r, i) => x.set(r, i * K));
  const result = await session.run({ x: new ort.Tensor('float32', x, [rows.length, K]) });
  await session.release();
  const y = result.y.data as Float32Array;
  return rows.map((_r, i) => y.slice(i * N, (i + 1) * N));
}

function reference(row: Float32Array, weight: Float32Array): Float32Array {
  return Float32Array.from({ length: N }, (_v, n) => row.reduce((sum, v, k) => sum + v * weight[k * N + n], 0));
}

const rewrite = (bytes: Uint8Array, how: typeof rowsFromQ8) => {
  const m = parseModel(bytes);
  const report = how(m);
  return { bytes: serializeModel(m), report };
};

const ROWS = [values(K, 1), values(K, 2), values(K, 3).map((v) => v * 0.01)];
/** A row far larger than the others: a per-tensor scale taken over it leaves them few levels. */
const LOUD = values(K, 4).map((v) => v * 1000);

/** Largest difference from the float answer, relative to the answer's largest magnitude. */
function relativeError(answer: Float32Array, expected: Float32Array): number {
  const size = Math.max(...expected.map(Math.abs));
  return Math.max(...answer.map((v, i) => Math.abs(v - expected[i]))) / size;
}

describe('int8-row rewrite', () => {
  for (const opset of [13, 18]) {
    it(`from fp32 weights (opset ${opset}): near the float answer, and each row alone equals it in a batch`, async () => {
      const rows = rewrite(floatModel(opset), rowsFromFp32);
      assert.deepEqual(rows.report, { quantizers: 1, matmuls: 1 });
      const ops = parseModel(rows.bytes).nodes.map((n) => n.opType);
      assert.ok(
        ops.includes('MatMulInteger') && !ops.includes('MatMul'),
        `the MatMul is now integer: ${ops.join(' ')}`,
      );
      const batched = await run(rows.bytes, [...ROWS, LOUD]);
      for (const [i, row] of ROWS.entries()) {
        const [alone] = await run(rows.bytes, [row]);
        assert.deepEqual(alone, batched[i], `row ${i} alone vs beside a loud row`);
        assert.ok(
          relativeError(alone, reference(row, WEIGHT)) < 0.02,
          `row ${i}: ${relativeError(alone, reference(row, WEIGHT))}`,
        );
      }
    });
  }

  it('from a per-tensor q8 graph: rows no longer depend on their batch mates', async () => {
    const q8 = q8Model();
    const before = await run(q8.bytes, [ROWS[0], LOUD]);
    const [beforeAlone] = await run(q8.bytes, [ROWS[0]]);
    // The test can fail: per tensor, the loud row takes the scale and the quiet row's answer moves.
    assert.ok(relativeError(before[0], beforeAlone) > 0.05, 'per-tensor q8 shifts a row beside a loud one');

    const rows = rewrite(q8.bytes, rowsFromQ8);
    assert.deepEqual(rows.report, { quantizers: 1, matmuls: 1 });
    const batched = await run(rows.bytes, [...ROWS, LOUD]);
    for (const [i, row] of ROWS.entries()) {
      const [alone] = await run(rows.bytes, [row]);
      assert.deepEqual(alone, batched[i], `row ${i} alone vs beside a loud row`);
      assert.ok(
        relativeError(alone, reference(row, q8.dequantized)) < 0.02,
        `row ${i}: ${relativeError(alone, reference(row, q8.dequantized))}`,
      );
    }
  });

  it('an all-zero row (padding) quantizes to zeros, not NaN', async () => {
    const rows = rewrite(floatModel(), rowsFromFp32);
    const [zero] = await run(rows.bytes, [new Float32Array(K)]);
    assert.deepEqual([...zero], Array<number>(N).fill(0));
  });

  it('refuses a model with nothing to quantize, and one before opset 11', () => {
    assert.throws(() => rewrite(floatModel(), rowsFromQ8), RewriteError);
    assert.throws(() => rewrite(q8Model().bytes, rowsFromFp32), RewriteError);
    assert.throws(() => rewrite(floatModel(10), rowsFromFp32), /opset 11/);
  });

  it("drops a Softmax's NaN guard, Where(IsNaN(p), 0, p), and answers the same", async () => {
    const guarded = (zero: number) =>
      model(
        [
          node('Softmax', ['x'], ['p'], [{ name: 'axis', int: -1 }]),
          node('IsNaN', ['p'], ['nan']),
          node('Where', ['nan', 'zero', 'p'], ['guarded']),
          node('MatMul', ['guarded', 'w'], ['y']),
        ],
        [
          initializer('w', TensorType.FLOAT, [K, N], new Uint8Array(WEIGHT.buffer)),
          initializer('zero', TensorType.FLOAT, [], new Uint8Array(Float32Array.of(zero).buffer)),
        ],
      );
    const m = parseModel(guarded(0));
    assert.equal(dropSoftmaxNanGuards(m), 1);
    assert.deepEqual(
      m.nodes.map((n) => n.opType),
      ['Softmax', 'Identity', 'MatMul'],
    );
    const without = serializeModel(m);
    assert.deepEqual(await run(without, [...ROWS, LOUD]), await run(guarded(0), [...ROWS, LOUD]));
    // The test can fail: a Where that puts anything but 0 in place of NaN is not a guard to drop.
    assert.equal(dropSoftmaxNanGuards(parseModel(guarded(1))), 0);
  });

  it('quantizes weights per output column: each column uses the full int8 range', () => {
    const weight = Float32Array.of(1, 100, -0.5, 50);
    const { values: q, scales } = quantizeColumns(weight, 2, 2);
    assert.deepEqual([...q], [127, 127, -64, 64]);
    assert.deepEqual([...scales], [Math.fround(1 / 127), Math.fround(100 / 127)]);
  });
});

/** A model folder holding the float graph as onnx/model.onnx, and a config beside it. */
function modelFolder(): { dir: string; cache: string; source: { file: string; sha256: string; from: 'fp32' } } {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-int8-row-test-'));
  const dir = path.join(root, 'model');
  fs.mkdirSync(path.join(dir, 'onnx'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'onnx', 'model.onnx'), floatModel());
  fs.writeFileSync(path.join(dir, 'config.json'), '{"model_type":"bert"}');
  return {
    dir,
    cache: path.join(root, 'cache'),
    source: { file: 'onnx/model.onnx', sha256: 'ab'.repeat(32), from: 'fp32' },
  };
}

/** Mounts `dir` over itself read-only, as compose and Kubernetes mount model volumes; false where this process may not mount. */
function mountReadOnly(dir: string): boolean {
  try {
    execFileSync('mount', ['--bind', dir, dir], { stdio: 'ignore' });
    execFileSync('mount', ['-o', 'remount,bind,ro', dir], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describe('the int8-row file', () => {
  it('is written beside the model once, and found there at the next start', async (t) => {
    const { dir, cache, source } = modelFolder();
    t.after(() => fs.rmSync(path.dirname(dir), { recursive: true, force: true }));
    const first = await int8RowWeights(dir, source, cache);
    assert.equal(first.dir, dir);
    assert.ok(first.written, 'the first start rewrites');
    const { mtimeMs } = fs.statSync(path.join(dir, first.file));
    const second = await int8RowWeights(dir, source, cache);
    assert.equal(second.written, undefined, 'the second start does not');
    assert.deepEqual(
      [second.dir, second.sha256, fs.statSync(path.join(dir, second.file)).mtimeMs],
      [dir, first.sha256, mtimeMs],
    );
  });

  it('goes to the cache, in a folder linked to the model, where the model folder is read-only', async (t) => {
    const { dir, cache, source } = modelFolder();
    const mounted = mountReadOnly(dir);
    t.after(() => {
      if (mounted) execFileSync('umount', [dir]);
      fs.rmSync(path.dirname(dir), { recursive: true, force: true });
    });
    if (!mounted) return t.skip('this process may not mount a folder read-only');
    assert.throws(() => fs.writeFileSync(path.join(dir, 'probe'), ''), /EROFS/);
    const first = await int8RowWeights(dir, source, cache);
    assert.ok(first.written && first.dir.startsWith(cache), `written under the cache: ${first.dir}`);
    assert.equal(fs.readFileSync(path.join(first.dir, 'config.json'), 'utf8'), '{"model_type":"bert"}');
    const [answer] = await run(fs.readFileSync(path.join(first.dir, first.file)), [ROWS[0]]);
    assert.ok(relativeError(answer, reference(ROWS[0], WEIGHT)) < 0.02);
    const second = await int8RowWeights(dir, source, cache);
    assert.deepEqual([second.written, second.dir, second.sha256], [undefined, first.dir, first.sha256]);
  });
});
