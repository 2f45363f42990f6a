import { isUtf8 } from 'node:buffer';
import { ApiError } from '@tserve/contract';
import { invalidUtf8, malformedJson } from '../http/http-errors.js';

/**
 * Triton's binary tensor data extension to the v2 protocol, which Triton's own HTTP client uses by
 * default: the body is a JSON header of `Inference-Header-Content-Length` bytes, then each binary
 * tensor's bytes in the order the JSON lists the tensors. Little-endian, row-major; a BYTES element
 * is a 4-byte length and then its bytes. This module reads such a request into the one JSON shape
 * the route validates, and writes the outputs asked for as binary.
 */

export const HEADER_LENGTH = 'inference-header-content-length';

function parseJson(bytes: Buffer): unknown {
  if (bytes.length === 0)
    throw new ApiError('validation', 'the request body is empty; send the inference request as JSON');
  if (!isUtf8(bytes)) throw invalidUtf8();
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    throw malformedJson((err as Error).message);
  }
}

/** A BYTES tensor's elements, as strings. */
export function decodeBytes(name: string, data: Buffer): string[] {
  const elements: string[] = [];
  for (let at = 0; at < data.length;) {
    if (data.length - at < 4)
      throw new ApiError(
        'validation',
        `input ${name}: binary data ends inside the length of element ${elements.length}`,
      );
    const length = data.readUInt32LE(at);
    at += 4;
    if (data.length - at < length)
      throw new ApiError(
        'validation',
        `input ${name}: element ${elements.length} is ${length} bytes but ${data.length - at} remain in its binary data`,
      );
    const element = data.subarray(at, at + length);
    if (!isUtf8(element))
      throw new ApiError('validation', `input ${name}: element ${elements.length} is not valid UTF-8 text`);
    elements.push(element.toString('utf8'));
    at += length;
  }
  return elements;
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The inference request in `body`: all JSON, or, with `headerLength`, a JSON header whose binary
 * inputs (`parameters.binary_data_size`) get their decoded elements as `data`. Anything else about
 * the request is left for the route's schema to judge.
 */
export function readInferBody(body: Buffer, headerLength: string | undefined): unknown {
  if (headerLength === undefined) return parseJson(body);
  const jsonLength = Number(headerLength);
  if (!Number.isInteger(jsonLength) || jsonLength < 0 || jsonLength > body.length)
    throw new ApiError(
      'validation',
      `Inference-Header-Content-Length must be the length of the JSON header, at most the body's ${body.length} bytes, not ${headerLength}`,
    );
  const request = parseJson(body.subarray(0, jsonLength));
  const binary = body.subarray(jsonLength);
  if (!isObject(request) || !Array.isArray(request.inputs)) return request;
  // First each binary input's share of the bytes, all of them: a share that does not fit says more than what decoding it would.
  let at = 0;
  const inputs = request.inputs.map(
    (input: unknown): { input: unknown } | { input: Json; name: string; data: Buffer } => {
      if (!isObject(input) || !isObject(input.parameters) || input.parameters.binary_data_size === undefined)
        return { input };
      const { binary_data_size: size, ...parameters } = input.parameters;
      const name = String(input.name);
      if (!Number.isInteger(size) || (size as number) < 0)
        throw new ApiError('validation', `input ${name}: parameters.binary_data_size must be a non-negative integer`);
      if (input.data !== undefined)
        throw new ApiError('validation', `input ${name}: send its elements in data or as binary data, not both`);
      if (binary.length - at < (size as number))
        throw new ApiError(
          'validation',
          `input ${name}: binary_data_size is ${size as number} bytes but ${binary.length - at} follow the JSON header`,
        );
      const data = binary.subarray(at, at + (size as number));
      at += size as number;
      return { input: { ...input, parameters }, name, data };
    },
  );
  if (at !== binary.length)
    throw new ApiError(
      'validation',
      `${binary.length} bytes follow the JSON header but the inputs' binary_data_size add up to ${at}`,
    );
  // Only BYTES is decoded: the route answers any other datatype with what it expects instead.
  request.inputs = inputs.map((entry) =>
    'data' in entry
      ? { ...entry.input, data: entry.input.datatype === 'BYTES' ? decodeBytes(entry.name, entry.data) : [] }
      : entry.input,
  );
  return request;
}

export type OutputTensor = { name: string; shape: number[] } & (
  { datatype: 'FP32'; data: number[] } | { datatype: 'BYTES'; data: string[] }
);

/** A tensor's binary form: FP32 little-endian, or each BYTES element as its length then its UTF-8 bytes. */
export function tensorBytes(tensor: OutputTensor): Buffer {
  if (tensor.datatype === 'BYTES') {
    return Buffer.concat(
      tensor.data.flatMap((element) => {
        const bytes = Buffer.from(element);
        const length = Buffer.alloc(4);
        length.writeUInt32LE(bytes.length);
        return [length, bytes];
      }),
    );
  }
  const bytes = Buffer.alloc(tensor.data.length * 4);
  tensor.data.forEach((v, i) => bytes.writeFloatLE(v, i * 4));
  return bytes;
}

/**
 * The response body: JSON when no output goes as binary, else the JSON header (the binary outputs
 * carry `binary_data_size` instead of `data`) followed by their bytes, and the header's length.
 */
export function writeInferResponse(
  response: Json & { outputs: OutputTensor[] },
  binary: (output: string) => boolean,
): { body: Buffer; headerLength?: number } {
  const chunks: Buffer[] = [];
  const outputs = response.outputs.map((tensor) => {
    if (!binary(tensor.name)) return tensor;
    const bytes = tensorBytes(tensor);
    chunks.push(bytes);
    return {
      name: tensor.name,
      datatype: tensor.datatype,
      shape: tensor.shape,
      parameters: { binary_data_size: bytes.length },
    };
  });
  const json = Buffer.from(JSON.stringify({ ...response, outputs }));
  return chunks.length ? { body: Buffer.concat([json, ...chunks]), headerLength: json.length } : { body: json };
}
