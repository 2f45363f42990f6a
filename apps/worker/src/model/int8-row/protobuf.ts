/**
 * Protocol Buffers at the wire level: a message is a list of fields, each kept as its bytes. The
 * rewrite decodes only the fields it reads and writes every other field back byte for byte, so
 * nothing of an ONNX file it does not know (newer fields, metadata) is lost.
 */

export const enum Wire {
  Varint = 0,
  Fixed64 = 1,
  Bytes = 2,
  Fixed32 = 5,
}

export interface Field {
  no: number;
  wire: Wire;
  /** Varint: the number; the others: the payload (for Bytes without its length). */
  value: bigint | Uint8Array;
}

export class ProtobufError extends Error {}

function readVarint(buf: Uint8Array, at: { pos: number }): bigint {
  let result = 0n;
  let shift = 0n;
  for (;;) {
    if (at.pos >= buf.length) throw new ProtobufError('truncated varint');
    const byte = buf[at.pos++];
    result |= BigInt(byte & 0x7f) << shift;
    if (byte < 0x80) return result;
    shift += 7n;
    if (shift > 63n) throw new ProtobufError('varint longer than 10 bytes');
  }
}

/** The fields of one message, in file order; payloads are views into `buf`, not copies. */
export function decodeFields(buf: Uint8Array): Field[] {
  const fields: Field[] = [];
  const at = { pos: 0 };
  while (at.pos < buf.length) {
    const tag = Number(readVarint(buf, at));
    const no = tag >>> 3;
    const wire = (tag & 7) as Wire;
    let value: bigint | Uint8Array;
    if (wire === Wire.Varint) value = readVarint(buf, at);
    else {
      const length =
        wire === Wire.Bytes ? Number(readVarint(buf, at)) : wire === Wire.Fixed64 ? 8 : wire === Wire.Fixed32 ? 4 : -1;
      if (length < 0) throw new ProtobufError(`unsupported wire type ${wire as number} (field ${no})`);
      if (at.pos + length > buf.length) throw new ProtobufError(`field ${no} runs past the end of its message`);
      value = buf.subarray(at.pos, at.pos + length);
      at.pos += length;
    }
    fields.push({ no, wire, value });
  }
  return fields;
}

function varint(value: bigint): Uint8Array {
  // Negative int64s are written as their two's complement, ten bytes.
  let v = value < 0n ? value + (1n << 64n) : value;
  const bytes: number[] = [];
  do {
    const low = Number(v & 0x7fn);
    v >>= 7n;
    bytes.push(v > 0n ? low | 0x80 : low);
  } while (v > 0n);
  return Uint8Array.from(bytes);
}

/** One field's bytes: tag, then value. */
function encodeField(field: Field): Uint8Array[] {
  const tag = varint(BigInt((field.no << 3) | field.wire));
  if (typeof field.value === 'bigint') return [tag, varint(field.value)];
  return field.wire === Wire.Bytes ? [tag, varint(BigInt(field.value.length)), field.value] : [tag, field.value];
}

export function encodeFields(fields: Field[]): Uint8Array {
  return Buffer.concat(fields.flatMap(encodeField));
}

const text = new TextDecoder();
const utf8 = new TextEncoder();

export const str = (field: Field): string => text.decode(field.value as Uint8Array);
export const num = (field: Field): number => Number(field.value);

/** Builders for the fields a new message is made of. */
export const out = {
  string: (no: number, s: string): Field => ({ no, wire: Wire.Bytes, value: utf8.encode(s) }),
  bytes: (no: number, b: Uint8Array): Field => ({ no, wire: Wire.Bytes, value: b }),
  int: (no: number, n: number): Field => ({ no, wire: Wire.Varint, value: BigInt(n) }),
  message: (no: number, fields: Field[]): Field => ({ no, wire: Wire.Bytes, value: encodeFields(fields) }),
};

/** A repeated varint field's values, packed (proto3 writers) or one per field (proto2 writers). */
export function varints(fields: Field[], no: number): number[] {
  const values: number[] = [];
  for (const f of fields) {
    if (f.no !== no) continue;
    if (typeof f.value === 'bigint') values.push(Number(BigInt.asIntN(64, f.value)));
    else {
      const at = { pos: 0 };
      while (at.pos < f.value.length) values.push(Number(BigInt.asIntN(64, readVarint(f.value, at))));
    }
  }
  return values;
}
