import { decodeFields, encodeFields, num, out, str, varints, Wire, type Field } from './protobuf.js';

/**
 * An ONNX model as the rewrite sees it: the graph's nodes and initializers, each decoded as far as
 * the rewrite reads it and written back from its own bytes when it is kept. Field numbers are
 * onnx.proto's (ModelProto, GraphProto, NodeProto, TensorProto, AttributeProto, OperatorSetIdProto).
 */

const MODEL_GRAPH = 7;
const MODEL_OPSET_IMPORT = 8;
const GRAPH_NODE = 1;
const GRAPH_INITIALIZER = 5;
const GRAPH_INPUT = 11;
const GRAPH_OUTPUT = 12;
const GRAPH_VALUE_INFO = 13;

export const TensorType = { FLOAT: 1, UINT8: 2, INT8: 3, INT32: 6, INT64: 7 } as const;

export interface OnnxNode {
  opType: string;
  domain: string;
  name: string;
  inputs: string[];
  outputs: string[];
  /** The node as it was read, written back unchanged; absent for a node the rewrite made. */
  field?: Field;
  attributes?: Attribute[];
}

interface Attribute {
  name: string;
  int?: number;
  ints?: number[];
}

export interface Initializer {
  name: string;
  field: Field;
}

export interface OnnxModel {
  /** The model's fields but its graph. */
  fields: Field[];
  /** The graph's fields but its nodes, initializers and value_info. */
  graphFields: Field[];
  /** Shape hints by tensor name; a rewrite drops those whose shapes it changes. */
  valueInfo: Map<string, Field>;
  nodes: OnnxNode[];
  initializers: Initializer[];
  /** The graph's declared inputs (an initializer named among them can be fed). */
  inputs: Set<string>;
  /** The default domain's opset. */
  opset: number;
}

export class OnnxFormatError extends Error {}

function named(fields: Field[], no: number): string {
  const f = fields.find((x) => x.no === no);
  return f ? str(f) : '';
}

function decodeNode(field: Field): OnnxNode {
  const fields = decodeFields(field.value as Uint8Array);
  return {
    inputs: fields.filter((f) => f.no === 1).map(str),
    outputs: fields.filter((f) => f.no === 2).map(str),
    name: named(fields, 3),
    opType: named(fields, 4),
    domain: named(fields, 7),
    field,
  };
}

export function parseModel(bytes: Uint8Array): OnnxModel {
  const fields = decodeFields(bytes);
  const graph = fields.find((f) => f.no === MODEL_GRAPH);
  if (!graph) throw new OnnxFormatError('not an ONNX model: no graph');
  const opset = fields
    .filter((f) => f.no === MODEL_OPSET_IMPORT)
    .map((f) => decodeFields(f.value as Uint8Array))
    .find((o) => ['', 'ai.onnx'].includes(named(o, 1)));
  const version = opset?.find((f) => f.no === 2);
  const model: OnnxModel = {
    fields: fields.filter((f) => f.no !== MODEL_GRAPH),
    graphFields: [],
    valueInfo: new Map(),
    nodes: [],
    initializers: [],
    inputs: new Set(),
    opset: version ? num(version) : 1,
  };
  for (const f of decodeFields(graph.value as Uint8Array)) {
    if (f.no === GRAPH_NODE) model.nodes.push(decodeNode(f));
    else if (f.no === GRAPH_INITIALIZER)
      model.initializers.push({ name: named(decodeFields(f.value as Uint8Array), 8), field: f });
    else if (f.no === GRAPH_VALUE_INFO) model.valueInfo.set(named(decodeFields(f.value as Uint8Array), 1), f);
    else {
      if (f.no === GRAPH_INPUT) model.inputs.add(named(decodeFields(f.value as Uint8Array), 1));
      model.graphFields.push(f);
    }
  }
  return model;
}

function attributeFields(a: Attribute): Field[] {
  // AttributeProto: name 1, i 3, ints 8, type 20 (INT 2, INTS 7).
  if (a.ints) return [out.string(1, a.name), ...a.ints.map((i) => out.int(8, i)), out.int(20, 7)];
  return [out.string(1, a.name), out.int(3, a.int ?? 0), out.int(20, 2)];
}

function nodeField(node: OnnxNode): Field {
  if (node.field) return node.field;
  return out.message(GRAPH_NODE, [
    ...node.inputs.map((i) => out.string(1, i)),
    ...node.outputs.map((o) => out.string(2, o)),
    out.string(3, node.name),
    out.string(4, node.opType),
    ...(node.attributes ?? []).map((a) => out.message(5, attributeFields(a))),
    ...(node.domain ? [out.string(7, node.domain)] : []),
  ]);
}

export function serializeModel(model: OnnxModel): Uint8Array {
  const graph = encodeFields([
    ...model.nodes.map(nodeField),
    ...model.graphFields,
    ...model.initializers.map((i) => i.field),
    ...model.valueInfo.values(),
  ]);
  return encodeFields([...model.fields, { no: MODEL_GRAPH, wire: Wire.Bytes, value: graph }]);
}

/** A new initializer: dims, data type and little-endian raw data. */
export function initializer(name: string, dataType: number, dims: number[], data: Uint8Array): Initializer {
  return {
    name,
    field: out.message(GRAPH_INITIALIZER, [
      ...dims.map((d) => out.int(1, d)),
      out.int(2, dataType),
      out.string(8, name),
      out.bytes(9, data),
    ]),
  };
}

export interface FloatTensor {
  dims: number[];
  data: Float32Array;
}

/** A float initializer's values, or undefined for any other type; its data must be in the file. */
export function floatTensor(init: Initializer): FloatTensor | undefined {
  const fields = decodeFields(init.field.value as Uint8Array);
  const type = fields.find((f) => f.no === 2);
  if (!type || num(type) !== TensorType.FLOAT) return undefined;
  const location = fields.find((f) => f.no === 14);
  if (location && num(location) === 1)
    throw new OnnxFormatError(
      `initializer ${init.name} keeps its data in an external file, which the rewrite does not read`,
    );
  const dims = varints(fields, 1);
  const count = dims.reduce((a, b) => a * b, 1);
  const raw = fields.find((f) => f.no === 9);
  let data: Float32Array;
  if (raw) {
    const bytes = raw.value as Uint8Array;
    data = new Float32Array(count);
    new Uint8Array(data.buffer).set(bytes.subarray(0, count * 4));
  } else {
    // float_data (4): packed, or one fixed32 per field.
    const chunks = fields.filter((f) => f.no === 4).map((f) => f.value as Uint8Array);
    const bytes = Buffer.concat(chunks);
    data = new Float32Array(count);
    new Uint8Array(data.buffer).set(bytes.subarray(0, count * 4));
  }
  return { dims, data };
}

/** A Constant node's float value, or undefined for any other type or form. */
export function constantTensor(node: OnnxNode): FloatTensor | undefined {
  if (!node.field) return undefined;
  // NodeProto attribute (5): AttributeProto name (1), t (5).
  for (const attribute of decodeFields(node.field.value as Uint8Array).filter((f) => f.no === 5)) {
    const fields = decodeFields(attribute.value as Uint8Array);
    const tensor = fields.find((f) => f.no === 5);
    if (named(fields, 1) === 'value' && tensor) return floatTensor({ name: node.outputs[0], field: tensor });
  }
  return undefined;
}

/** The names of the graph's outputs. */
export function graphOutputs(model: OnnxModel): Set<string> {
  return new Set(
    model.graphFields.filter((f) => f.no === GRAPH_OUTPUT).map((f) => named(decodeFields(f.value as Uint8Array), 1)),
  );
}

/** Users of each tensor. */
export function consumers(nodes: OnnxNode[]): Map<string, Array<{ node: OnnxNode; slot: number }>> {
  const users = new Map<string, Array<{ node: OnnxNode; slot: number }>>();
  for (const node of nodes)
    node.inputs.forEach((name, slot) => users.set(name, [...(users.get(name) ?? []), { node, slot }]));
  return users;
}
