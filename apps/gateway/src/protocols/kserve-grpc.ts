import { randomUUID } from 'node:crypto';
import { isUtf8 } from 'node:buffer';
import { ApiError } from '@tserve/contract';
import type { GrpcCall, GrpcService } from '../grpc/grpc-calls.js';
import type { Snapshot } from '../serving/snapshot.js';
import { admitMetadata } from '../serving/metadata-call.js';
import type { ProtocolParts } from '../serving/envelope.js';
import { answerInfer, type InferAnswer } from './kserve-infer.js';
import { decodeBytes, tensorBytes } from './kserve-binary.js';
import { modelConfig, modelStats, tritonModel } from './kserve-triton.js';
import { checkVersion, metadata, modelReady, SERVER_METADATA, serverReady, servedOrRefused } from './kserve.js';

/**
 * The KServe v2 protocol over gRPC, as Triton serves it (`inference.GRPCInferenceService` in
 * packages/contract/proto/inference.proto): the same answers as its HTTP routes (kserve.ts), from
 * the same code. Inference takes a BYTES tensor of texts, in `contents.bytes_contents` or, as
 * Triton's client sends it, in `raw_input_contents`; outputs go back as raw contents, as Triton's
 * do. In a stream, each request is answered on its own as it finishes, and a failed one answers
 * with its `error_message` without ending the stream.
 */

type Parameters = Record<string, { parameter_choice?: string } & Record<string, unknown>>;

/** `map<string, InferParameter>` as the JSON form's parameters: each one's value, whichever kind it is. */
function parametersOf(parameters: Parameters | undefined): Record<string, unknown> | undefined {
  const entries = Object.entries(parameters ?? {});
  if (entries.length === 0) return undefined;
  return Object.fromEntries(entries.map(([name, p]) => [name, p.parameter_choice ? p[p.parameter_choice] : undefined]));
}

interface InputTensor {
  name: string;
  datatype: string;
  shape: number[];
  parameters?: Parameters;
  contents?: { bytes_contents?: Buffer[] } | null;
}

/** An input's elements: its raw contents decoded where it has them, else its typed contents' texts. */
function dataOf(input: InputTensor, raw: Buffer | undefined): unknown[] {
  const typed = input.contents?.bytes_contents ?? [];
  if (raw !== undefined) {
    if (typed.length > 0)
      throw new ApiError(
        'validation',
        `input ${input.name}: send its elements in contents or raw_input_contents, not both`,
      );
    return input.datatype === 'BYTES' ? decodeBytes(input.name, raw) : [];
  }
  return typed.map((element, i) => {
    if (!isUtf8(element)) throw new ApiError('validation', `input ${input.name}: element ${i} is not valid UTF-8 text`);
    return element.toString('utf8');
  });
}

interface InferRequestMessage {
  model_name: string;
  model_version: string;
  id: string;
  parameters?: Parameters;
  inputs: InputTensor[];
  outputs: Array<{ name: string; parameters?: Parameters }>;
  raw_input_contents: Buffer[];
}

/** A ModelInferRequest in the JSON form the HTTP route validates (kserve-schemas.ts). */
function asJson(request: InferRequestMessage): unknown {
  const raw = request.raw_input_contents;
  if (raw.length > 0 && raw.length !== request.inputs.length)
    throw new ApiError(
      'validation',
      `raw_input_contents holds ${raw.length} tensors for ${request.inputs.length} inputs; send one per input, in order`,
    );
  const parameters = parametersOf(request.parameters);
  return {
    ...(request.id ? { id: request.id } : {}),
    ...(parameters ? { parameters } : {}),
    inputs: request.inputs.map((input, i) => {
      const inputParameters = parametersOf(input.parameters);
      return {
        name: input.name,
        datatype: input.datatype,
        shape: input.shape,
        ...(inputParameters ? { parameters: inputParameters } : {}),
        data: dataOf(input, raw.length > 0 ? raw[i] : undefined),
      };
    }),
    ...(request.outputs.length > 0
      ? {
          outputs: request.outputs.map((output) => {
            const outputParameters = parametersOf(output.parameters);
            return { name: output.name, ...(outputParameters ? { parameters: outputParameters } : {}) };
          }),
        }
      : {}),
  };
}

/** An answer as a ModelInferResponse: each output's shape here, its contents in `raw_output_contents`. */
function asMessage(answer: InferAnswer): object {
  return {
    model_name: answer.model_name,
    model_version: answer.model_version,
    id: answer.id ?? '',
    outputs: answer.outputs.map(({ name, datatype, shape }) => ({ name, datatype, shape })),
    raw_output_contents: answer.outputs.map(tensorBytes),
  };
}

interface KserveGrpcParts extends ProtocolParts {
  snapshot: Snapshot;
}

/** One inference request of a call (a stream carries many): admitted as an HTTP request is, then answered. */
async function inferOne(parts: KserveGrpcParts, call: GrpcCall, request: InferRequestMessage, requestId: string) {
  // Admitted first, as an HTTP request is before its body is read: who calls comes before what they ask.
  const { envelope, release } = await admitMetadata(parts, call, request.model_name, requestId);
  try {
    checkVersion(request.model_version || undefined);
    const { answer } = await answerInfer(parts.service, envelope, request.model_name, asJson(request));
    return asMessage(answer);
  } finally {
    release();
  }
}

/** The model a request names (ModelReady, ModelMetadata, ModelConfig, ModelStatistics), its version checked. */
function nameOf(request: unknown): string {
  const { name, version } = request as { name: string; version: string };
  checkVersion(version || undefined);
  return name;
}

export function kserveGrpc(parts: KserveGrpcParts): GrpcService {
  const { registry, snapshot } = parts;
  const named = (request: unknown) => servedOrRefused(registry, nameOf(request));
  return {
    protoFile: 'inference.proto',
    name: 'inference.GRPCInferenceService',
    unary: {
      ServerLive: async () => ({ live: true }),
      ServerReady: async () => ({ ready: serverReady(snapshot) }),
      ModelReady: async (request) => ({ ready: modelReady(registry, nameOf(request)) }),
      ServerMetadata: async () => SERVER_METADATA,
      ModelMetadata: async (request) => metadata(named(request)),
      ModelConfig: async (request) => ({ config: modelConfig(tritonModel(named(request))) }),
      ModelStatistics: async (request) => {
        const name = nameOf(request);
        const models = name === '' ? registry.served() : [servedOrRefused(registry, name)];
        return { model_stats: models.map((m) => modelStats(tritonModel(m))) };
      },
      ModelInfer: (request, call) => inferOne(parts, call, request as InferRequestMessage, call.requestId),
    },
    streams: {
      ModelStreamInfer: async (requests, send, call) => {
        const running: Array<Promise<void>> = [];
        for await (const request of requests as AsyncIterable<InferRequestMessage>) {
          running.push(
            inferOne(parts, call, request, randomUUID()).then(
              (response) => send({ error_message: '', infer_response: response }),
              (err) => {
                if (!(err instanceof ApiError)) throw err;
                send({
                  error_message: err.message,
                  infer_response: { id: request.id, model_name: request.model_name },
                });
              },
            ),
          );
        }
        await Promise.all(running);
      },
    },
  };
}
