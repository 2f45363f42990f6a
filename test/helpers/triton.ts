/** Bodies as Triton's own HTTP client (tritonclient.http) builds them, for the unit and system tests of the binary extension. */

/** A BYTES tensor as the client serializes it (tritonclient.utils.serialize_byte_tensor): length, then bytes, per element. */
export function bytesTensor(elements: Array<string | Buffer>): Buffer {
  return Buffer.concat(
    elements.flatMap((e) => {
      const bytes = typeof e === 'string' ? Buffer.from(e) : e;
      const length = Buffer.alloc(4);
      length.writeUInt32LE(bytes.length);
      return [length, bytes];
    }),
  );
}

/** A request as the client builds it (_get_inference_request): the JSON header, then each binary input's bytes; and the header's length. */
export function binaryRequest(request: object, ...tensors: Buffer[]): [Buffer, string] {
  const json = Buffer.from(JSON.stringify(request));
  return [Buffer.concat([json, ...tensors]), String(json.length)];
}
