import { consumers, floatTensor, initializer, TensorType, type OnnxModel, type OnnxNode } from './onnx.js';

/**
 * int8 per row: every quantized MatMul's activations are quantized row by row (each token's vector
 * with its own scale), so a row's answer depends on that row alone, never on its batch mates or
 * padding; weights are int8 per output channel. ONNX Runtime's dynamic quantization
 * (DynamicQuantizeLinear) takes one scale for the whole input tensor instead.
 *
 * The row quantizer is symmetric: scale = max|x| / 63 over the last axis, q = round(x / scale)
 * + 64 as uint8 with zero point 64 (QuantizeLinear), so MatMulInteger runs its u8 x s8 kernel.
 * Its scale is [..., rows, 1], which broadcasts wherever the per-tensor scalar did.
 *
 * Seven bits, not eight: on a CPU without VNNI (AVX2, AVX-512 before it), that kernel adds the
 * products of two neighbouring u8 x s8 pairs in 16 bits, saturating above 32,767; u8 values up to
 * 127 keep 2 × 127 × 127 below it, where the full byte (up to 255 around 128) does not and gave
 * answers several percent off on an AMD EPYC. A row's own scale keeps 7 bits close to what a
 * tensor-wide 8-bit scale gives.
 */

/** The largest |q| of an activation, and the zero point that keeps q + it within 1..127 (see above). */
const LEVELS = 63;
const ZERO_POINT = 64;

/** Names the rewrite: part of the cached file's name and of what /ready reports, so a change to it is a new file. */
export const REWRITE = 'int8-row-v2' as const;

export class RewriteError extends Error {}

const isDefaultDomain = (node: OnnxNode) => node.domain === '' || node.domain === 'ai.onnx';

/** What a rewrite changed, for the start-up log. */
export interface RewriteReport {
  /** Activation quantizers now per row. */
  quantizers: number;
  /** MatMuls now integer (from fp32 weights) or already integer (from q8). */
  matmuls: number;
}

/** Builds the nodes and shared constants of the rewritten graph. */
class Builder {
  readonly nodes: OnnxNode[] = [];
  private readonly constants = new Map<string, string>();
  private count = 0;

  constructor(private readonly model: OnnxModel) {}

  name(hint: string): string {
    return `int8_row/${hint}/${this.count++}`;
  }

  node(opType: string, inputs: string[], outputs: string[], attributes?: OnnxNode['attributes']): void {
    this.nodes.push({
      opType,
      domain: '',
      name: this.name(opType),
      inputs,
      outputs,
      ...(attributes ? { attributes } : {}),
    });
  }

  /** A scalar (or 1-D int64) constant, added once. */
  constant(dataType: number, value: number | number[]): string {
    const key = `${dataType}:${String(value)}`;
    const known = this.constants.get(key);
    if (known) return known;
    const name = `int8_row/constant/${this.constants.size}`;
    const data =
      dataType === TensorType.FLOAT
        ? new Uint8Array(Float32Array.of(value as number).buffer)
        : dataType === TensorType.UINT8
          ? Uint8Array.of(value as number)
          : new Uint8Array(BigInt64Array.from((value as number[]).map(BigInt)).buffer);
    this.model.initializers.push(initializer(name, dataType, Array.isArray(value) ? [value.length] : [], data));
    this.constants.set(key, name);
    return name;
  }

  /** Quantizes `x` per row into `q` (uint8), `scale` (float, [..., 1]); the zero point is ZERO_POINT. */
  rowQuantizer(x: string, q: string, scale: string): void {
    const n = (what: string) => this.name(what);
    const [max, min, negated, safe, inverse, scaled] = ['max', 'min', 'negated', 'safe', 'inverse', 'scaled'].map(n);
    // max|x| as the larger of max and -min: two reads of x, where Abs would write a copy of it first.
    this.reduce('ReduceMax', x, max);
    this.reduce('ReduceMin', x, min);
    this.node('Neg', [min], [negated]);
    // An all-zero row (padding can be one) would divide by zero; any positive scale quantizes it to zeros.
    this.node('Max', [max, negated, this.constant(TensorType.FLOAT, 1e-30)], [safe]);
    this.node('Div', [this.constant(TensorType.FLOAT, LEVELS), safe], [inverse]);
    this.node('Mul', [safe, this.constant(TensorType.FLOAT, 1 / LEVELS)], [scale]);
    // |x| <= max|x| of its row, so x * LEVELS / max|x| lies in [-LEVELS, LEVELS]. QuantizeLinear with a
    // scale of 1 then rounds, shifts by ZERO_POINT and casts in one pass that ONNX Runtime spreads over its
    // threads; given the row scales along an axis (opset 13), it would run on one thread.
    this.node('Mul', [x, inverse], [scaled]);
    this.node('QuantizeLinear', [scaled, this.constant(TensorType.FLOAT, 1), this.zeroPoint()], [q]);
  }

  /** A reduction over the last axis, kept: its axes are an attribute before opset 18 and an input since. */
  private reduce(opType: 'ReduceMax' | 'ReduceMin', x: string, result: string): void {
    const keep = { name: 'keepdims', int: 1 };
    if (this.model.opset >= 18) this.node(opType, [x, this.constant(TensorType.INT64, [-1])], [result], [keep]);
    else this.node(opType, [x], [result], [{ name: 'axes', ints: [-1] }, keep]);
  }

  zeroPoint(): string {
    return this.constant(TensorType.UINT8, ZERO_POINT);
  }
}

function checkOpset(model: OnnxModel): void {
  // ReduceMax and ReduceMin over a negative axis, as the rewrite writes them, came in opset 11.
  if (model.opset < 11) throw new RewriteError(`int8-row needs opset 11 or later; the model has opset ${model.opset}`);
}

/**
 * From a per-tensor q8 export (ONNX Runtime's quantize_dynamic): each DynamicQuantizeLinear that
 * feeds only MatMulIntegers becomes a row quantizer with the same outputs. The MatMulIntegers and
 * the scale Muls after them stay as they are.
 */
export function rowsFromQ8(model: OnnxModel): RewriteReport {
  checkOpset(model);
  const users = consumers(model.nodes);
  const build = new Builder(model);
  const nodes: OnnxNode[] = [];
  let quantizers = 0;
  let matmuls = 0;
  for (const node of model.nodes) {
    const [q, scale, zeroPoint] = node.outputs;
    const feedsMatMuls =
      node.opType === 'DynamicQuantizeLinear' &&
      isDefaultDomain(node) &&
      [q, zeroPoint].every((t) =>
        (users.get(t) ?? []).every((u) => u.node.opType === 'MatMulInteger' && u.slot === (t === q ? 0 : 2)),
      );
    if (!feedsMatMuls) {
      nodes.push(node);
      continue;
    }
    build.nodes.length = 0;
    build.rowQuantizer(node.inputs[0], q, scale);
    nodes.push(...build.nodes);
    // The zero point is now a constant: the tensor of that name becomes an initializer.
    model.initializers.push(initializer(zeroPoint, TensorType.UINT8, [], Uint8Array.of(ZERO_POINT)));
    // The scale and what is computed from it are no longer scalars.
    for (const t of [scale, ...(users.get(scale) ?? []).flatMap((u) => u.node.outputs)]) model.valueInfo.delete(t);
    quantizers++;
    matmuls += (users.get(q) ?? []).length;
  }
  if (quantizers === 0)
    throw new RewriteError('no DynamicQuantizeLinear feeding MatMulInteger: not a dynamically quantized (q8) model');
  model.nodes = nodes;
  return { quantizers, matmuls };
}

/** int8 weights per output column of a [K, N] weight, and their scales. */
export function quantizeColumns(
  weight: Float32Array,
  rows: number,
  columns: number,
): { values: Int8Array; scales: Float32Array } {
  const scales = new Float32Array(columns);
  for (let k = 0; k < rows; k++) {
    for (let n = 0; n < columns; n++) scales[n] = Math.max(scales[n], Math.abs(weight[k * columns + n]));
  }
  for (let n = 0; n < columns; n++) scales[n] = scales[n] > 0 ? scales[n] / 127 : 1;
  const values = new Int8Array(rows * columns);
  for (let k = 0; k < rows; k++) {
    for (let n = 0; n < columns; n++) values[k * columns + n] = Math.round(weight[k * columns + n] / scales[n]);
  }
  return { values, scales };
}

/**
 * From fp32 weights: each MatMul of an activation by a constant 2-D float weight becomes
 * MatMulInteger of the row-quantized activation by the weight quantized per output column, then
 * Cast and the two scales. MatMuls of two activations (attention) stay float.
 */
export function rowsFromFp32(model: OnnxModel): RewriteReport {
  checkOpset(model);
  const inits = new Map(model.initializers.map((i) => [i.name, i]));
  const users = consumers(model.nodes);
  const build = new Builder(model);
  const quantized = new Map<string, { q: string; scale: string }>();
  const weights = new Map<string, { values: string; scales: string }>();
  const dropped = new Set<string>();
  const nodes: OnnxNode[] = [];
  let matmuls = 0;
  for (const node of model.nodes) {
    const [x, w] = node.inputs;
    const weight =
      node.opType === 'MatMul' && isDefaultDomain(node) && !inits.has(x) && !model.inputs.has(w)
        ? inits.get(w)
        : undefined;
    const tensor = weight && floatTensor(weight);
    if (!tensor || tensor.dims.length !== 2) {
      nodes.push(node);
      continue;
    }
    build.nodes.length = 0;
    let activation = quantized.get(x);
    if (!activation) {
      activation = { q: build.name('q'), scale: build.name('scale') };
      build.rowQuantizer(x, activation.q, activation.scale);
      quantized.set(x, activation);
    }
    let integer = weights.get(w);
    if (!integer) {
      const [rows, columns] = tensor.dims;
      const { values, scales } = quantizeColumns(tensor.data, rows, columns);
      integer = { values: `${w}/int8_row`, scales: `${w}/int8_row_scale` };
      model.initializers.push(
        initializer(integer.values, TensorType.INT8, [rows, columns], new Uint8Array(values.buffer)),
      );
      model.initializers.push(initializer(integer.scales, TensorType.FLOAT, [columns], new Uint8Array(scales.buffer)));
      weights.set(w, integer);
      // The float weight goes when every user of it is rewritten here.
      if ((users.get(w) ?? []).every((u) => u.node.opType === 'MatMul' && u.slot === 1)) dropped.add(w);
    }
    const [product, float, scale] = ['product', 'float', 'scale'].map((h) => build.name(h));
    build.node('MatMulInteger', [activation.q, integer.values, build.zeroPoint()], [product]);
    build.node('Cast', [product], [float], [{ name: 'to', int: TensorType.FLOAT }]);
    // Row scale [..., 1] times column scales [N]: the scale of each output element.
    build.node('Mul', [activation.scale, integer.scales], [scale]);
    build.node('Mul', [float, scale], node.outputs);
    nodes.push(...build.nodes);
    matmuls++;
  }
  if (matmuls === 0) throw new RewriteError('no MatMul by a constant float weight to quantize');
  model.nodes = nodes;
  model.initializers = model.initializers.filter((i) => !dropped.has(i.name));
  return { quantizers: quantized.size, matmuls };
}
