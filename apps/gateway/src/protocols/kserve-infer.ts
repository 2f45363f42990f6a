import type { Request, Response } from 'express';
import { ApiError, applyScoreFunction, BULK, describeIssues, parseLenient, type Priority } from '@tserve/contract';
import type { z } from 'zod';
import type { ServedModel } from '../serving/served-models.js';
import {
  answerHeaders,
  callPart,
  httpEnvelope,
  inferenceRequest,
  type Envelope,
  type ProtocolParts,
} from '../serving/envelope.js';
import type { InferenceResult, InferenceService } from '../serving/inference.js';
import { HEADER_LENGTH, readInferBody, writeInferResponse, type OutputTensor } from './kserve-binary.js';
import { inferRequest } from './kserve-schemas.js';
import { noteIgnored } from '../http/ignored-fields.js';
import { kindOf, outputsOf, VERSION } from './kserve-triton.js';

/**
 * `POST /v2/models/<name>/infer`: a BYTES tensor of texts in, FP32 tensors out (a classifier's
 * probabilities or logits in label order, an embedding model's embeddings), as JSON or as Triton's
 * binary tensor data.
 */

type InferBody = z.output<typeof inferRequest>;

const tensor = (name: string, rows: number[][]): OutputTensor => ({
  name,
  datatype: 'FP32',
  shape: [rows.length, rows[0]?.length ?? 0],
  data: rows.flat(),
});

/**
 * Triton's classification extension: an output asked for with `classification: k` answers, per
 * row, the k largest values as BYTES "value:index:label", largest first.
 */
function classes(name: string, rows: number[][], labels: string[], k: number): OutputTensor {
  const top = rows.map((row) =>
    row
      .map((value, index) => ({ value, index }))
      .sort((a, b) => b.value - a.value)
      .slice(0, k)
      .map(({ value, index }) => `${value.toFixed(6)}:${index}:${labels[index] ?? ''}`),
  );
  return { name, datatype: 'BYTES', shape: [rows.length, Math.min(k, rows[0]?.length ?? 0)], data: top.flat() };
}

/** The k an output asks for with `classification` (tritonclient's class_count); undefined when it asks for the tensor itself. */
function classCount(output: { name: string; parameters?: Record<string, unknown> } | undefined): number | undefined {
  const k = output?.parameters?.classification;
  if (k === undefined) return undefined;
  if (!Number.isInteger(k) || (k as number) < 1)
    throw new ApiError(
      'validation',
      `output ${output!.name}: parameters.classification must be a positive integer (the number of classes)`,
    );
  return k as number;
}

/** A classifier call's parameters for one output: every label's score, raw for the logits. */
const classifierParameters = (output: string) => ({
  top_k: null,
  ...(output === 'logits' ? { function_to_apply: 'none' } : {}),
});

/** A classifier's answers as rows in the model's label order (the answers come ranked). */
function classifierRows(m: ServedModel, outputs: unknown): number[][] {
  return (outputs as Array<Array<{ label: string; score: number }>>).map((scores) => {
    const byLabel = new Map(scores.map((s) => [s.label, s.score]));
    return (m.labels ?? scores.map((s) => s.label)).map((label) => byLabel.get(label) ?? 0);
  });
}

/** Triton's request parameters: `timeout` in microseconds, `priority` 1 highest (0: the default). */
function controls(params: Record<string, unknown> | undefined): { timeoutMs?: number; priority?: Priority } {
  const out: { timeoutMs?: number; priority?: Priority } = {};
  if (params?.timeout !== undefined) {
    if (!Number.isInteger(params.timeout) || (params.timeout as number) < 1)
      throw new ApiError('validation', 'parameters.timeout must be a positive integer (microseconds)');
    out.timeoutMs = Math.max(1, Math.ceil((params.timeout as number) / 1000));
  }
  if (params?.priority !== undefined) {
    if (!Number.isInteger(params.priority) || (params.priority as number) < 0)
      throw new ApiError('validation', 'parameters.priority must be a non-negative integer (1 is the highest)');
    if ((params.priority as number) > 1) out.priority = BULK;
  }
  return out;
}

/** The request's texts: its one input, a BYTES tensor of shape [n] or [n, 1] of non-empty strings. */
function textsOf(body: InferBody): string[] {
  const [input] = body.inputs;
  if (input.datatype !== 'BYTES')
    throw new ApiError('validation', `input ${input.name}: datatype must be BYTES (the texts), not ${input.datatype}`);
  const [rows, ...rest] = input.shape;
  if (input.shape.length === 0 || input.shape.length > 2 || rest.some((d) => d !== 1)) {
    throw new ApiError(
      'validation',
      `input ${input.name}: shape must be [n] or [n, 1], not ${JSON.stringify(input.shape)}`,
    );
  }
  // Row-major data may nest as deep as its shape, no deeper: anything deeper is no text, and is
  // refused below without walking it (a body of 300,000 nested lists overflowed a recursive walk's stack).
  const texts = input.data.flat(input.shape.length - 1);
  if (texts.length !== rows)
    throw new ApiError(
      'validation',
      `input ${input.name}: shape ${JSON.stringify(input.shape)} holds ${rows} texts but data has ${texts.length}`,
    );
  if (texts.some((t) => typeof t !== 'string' || t.length === 0))
    throw new ApiError('validation', `input ${input.name}: every element must be a non-empty string`);
  if (rows === 0) throw new ApiError('validation', `input ${input.name}: send at least one text`);
  return texts as string[];
}

/** The outputs asked for (the model's default one when none is named), each with its class count. */
function wantedOutputs(m: ServedModel, name: string, body: InferBody): Map<string, number | undefined> {
  const offered = outputsOf(m);
  const wanted = body.outputs?.map((o) => o.name) ?? [offered[0]];
  const unknown = wanted.filter((w) => !offered.includes(w));
  if (unknown.length)
    throw new ApiError(
      'validation',
      `unknown output(s) ${unknown.join(', ')}; model ${name} offers ${offered.join(', ')}`,
    );
  const counts = new Map(wanted.map((output) => [output, classCount(body.outputs?.find((o) => o.name === output))]));
  if (kindOf(m) === 'embedding' && [...counts.values()].some((k) => k !== undefined))
    throw new ApiError(
      'validation',
      `parameters.classification applies to a classifier's outputs; model ${name} answers embeddings`,
    );
  return counts;
}

/** Runs the model calls the outputs need, and makes each output's tensor. */
async function outputTensors(
  m: ServedModel,
  counts: Map<string, number | undefined>,
  call: (output: string, i: number, parameters: Record<string, unknown>) => Promise<{ outputs: unknown[] }>,
): Promise<OutputTensor[]> {
  const wanted = [...counts.keys()];
  if (kindOf(m) === 'embedding') return [tensor('embeddings', (await call('embeddings', 0, {})).outputs as number[][])];
  // A classifier's output asked for with `classification` answers its top classes instead of the tensor.
  const classifierTensor = (output: string, rows: number[][]): OutputTensor => {
    const k = counts.get(output);
    return k === undefined ? tensor(output, rows) : classes(output, rows, m.labels ?? [], k);
  };
  if (wanted.length > 1 && m.scoreFunction) {
    // Both outputs from one model run: the probabilities are the model's default function of its logits.
    const logits = classifierRows(m, (await call('logits', 0, classifierParameters('logits'))).outputs);
    const scoreFunction = m.scoreFunction;
    const byOutput = {
      logits,
      probabilities: logits.map((row) => Array.from(applyScoreFunction(scoreFunction, row))),
    };
    return wanted.map((output) => classifierTensor(output, byOutput[output as keyof typeof byOutput]));
  }
  return Promise.all(
    wanted.map(async (output, i) => {
      const result = await call(output, i, classifierParameters(output));
      return classifierTensor(output, classifierRows(m, result.outputs));
    }),
  );
}

/** An infer request's answer, whatever protocol carries it. */
export interface InferAnswer {
  model_name: string;
  model_version: string;
  id?: string;
  outputs: OutputTensor[];
}

/**
 * Answers the infer request `json` (as JSON would have it; validated here) for model `name`, whose
 * version was checked; also returns the request as validated, and each of its model calls' results
 * (an HTTP answer carries their headers).
 */
export async function answerInfer(
  service: InferenceService,
  envelope: Envelope,
  name: string,
  json: unknown,
): Promise<{ answer: InferAnswer; body: InferBody; ignored: string[]; results: InferenceResult[] }> {
  const parsed = parseLenient(inferRequest, json);
  if (!parsed.success) throw new ApiError('validation', describeIssues(parsed.error));
  const body = parsed.data;
  const { timeoutMs, priority } = controls(body.parameters);
  // Its task, texts and parameters depend on the model (its kind, its outputs): filled in once it is known.
  const request = inferenceRequest(envelope, { model: name, inputs: [], timeoutMs, priority });
  const model = await service.modelFor(request);
  const m = model.served;
  const kind = kindOf(m);
  if (!kind)
    throw new ApiError(
      'validation',
      `model ${name} serves ${m.task}; the v2 protocol here serves classifiers and embedding models`,
    );
  request.task = kind === 'classifier' ? 'text-classification' : 'feature-extraction';
  request.inputs = textsOf(body);
  const counts = wantedOutputs(m, name, body);
  const results: InferenceResult[] = [];
  const outputs = await outputTensors(m, counts, async (output, i, parameters) => {
    // Each output's call after the first is a request of its own: its own part of the request id.
    const call = { ...request, parameters };
    const result = await service.infer(i > 0 ? callPart(call, output) : call, model);
    results.push(result);
    return result;
  });
  const answer = {
    model_name: m.id,
    model_version: VERSION,
    ...(body.id !== undefined ? { id: body.id } : {}),
    outputs,
  };
  return { answer, body, ignored: parsed.ignored, results };
}

/** Answers `POST /v2/models/<name>/infer`, whose version was checked. */
export async function infer(parts: ProtocolParts, req: Request, res: Response, name: string): Promise<void> {
  const json = readInferBody(Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0), req.get(HEADER_LENGTH));
  const envelope = httpEnvelope(req, res, parts.config.REQUEST_TIMEOUT_MS);
  const { answer, body, ignored, results } = await answerInfer(parts.service, envelope, name, json);
  for (const result of results) answerHeaders(res, envelope, result);
  noteIgnored(res, ignored);
  // An output's own binary_data decides, else the request's binary_data_output (Triton's client sets it when it names no outputs).
  const binary = (output: string) =>
    (body.outputs?.find((o) => o.name === output)?.parameters?.binary_data ?? body.parameters?.binary_data_output) ===
    true;
  const written = writeInferResponse({ ...answer }, binary);
  if (written.headerLength !== undefined)
    res.set(HEADER_LENGTH, String(written.headerLength)).type('application/octet-stream');
  else res.type('application/json');
  res.send(written.body);
}
