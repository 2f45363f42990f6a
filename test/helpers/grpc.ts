/**
 * gRPC clients for the tests and the bench, as a user's generated client would make its calls:
 * `@grpc/grpc-js` stubs built from the repository's own `.proto` files (packages/contract/proto).
 */
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ROOT } from './processes.ts';

export const PROTO_DIR = path.join(ROOT, 'packages/contract/proto');

/** Messages as plain objects with the `.proto`'s field names; 64-bit numbers and enums as numbers and names. */
const LOADER = { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true };

export type GrpcClient = grpc.Client & Record<string, any>;

/** A stub of `service` (package.Service) in `proto`, found in `includeDirs`, for the server on a local port. */
export function grpcClient(
  service: string,
  port: number,
  proto = 'inference.proto',
  includeDirs = [PROTO_DIR],
): GrpcClient {
  const loaded = grpc.loadPackageDefinition(protoLoader.loadSync(proto, { ...LOADER, includeDirs }));
  const Service = service.split('.').reduce((at: any, part) => at[part], loaded);
  return new Service(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
}

/** A unary call's answer, or its error (a ServiceError: code, details, metadata). */
export function unary(
  client: GrpcClient,
  method: string,
  request: object,
  options: { metadata?: Record<string, string>; deadlineMs?: number } = {},
): Promise<any> {
  const metadata = new grpc.Metadata();
  for (const [k, v] of Object.entries(options.metadata ?? {})) metadata.set(k, v);
  const callOptions = options.deadlineMs ? { deadline: Date.now() + options.deadlineMs } : {};
  return new Promise((resolve, reject) =>
    client[method](request, metadata, callOptions, (err: grpc.ServiceError | null, answer: any) =>
      err ? reject(err) : resolve(answer),
    ),
  );
}

/** KServe's input tensor of texts, as `bytes_contents`. */
export function texts(...values: string[]) {
  return {
    name: 'text',
    datatype: 'BYTES',
    shape: [values.length],
    contents: { bytes_contents: values.map((t) => Buffer.from(t)) },
  };
}
