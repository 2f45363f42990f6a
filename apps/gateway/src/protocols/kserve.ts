import type { IRouter, Request } from 'express';
import { z } from 'zod';
import { ApiError, applyScoreFunction, describeIssues, type Priority } from '@tserve/contract';
import type { ServedModel } from '../serving/model-registry.js';
import type { Snapshot } from '../serving/snapshot.js';
import { errorHandler, type ErrorFormat } from '../http/http-errors.js';
import { rawBody, runRouteCall, servedModel, wildcardPath, type ProtocolParts } from '../serving/route-call.js';
import { HEADER_LENGTH, readInferBody, writeInferResponse, type OutputTensor } from './kserve-binary.js';
import { modelConfig, modelStats, type Statistics, type TritonModel } from './kserve-triton.js';

/**
 * The KServe v2 / Open Inference Protocol over HTTP (what Triton speaks): health, server and model
 * metadata, and inference on a BYTES tensor of texts, answered with FP32 tensors: a classifier's
 * probabilities or logits in label order, an embedding model's embeddings. Model names hold a
 * slash (`replica/x`), sent as is or as %2F. Tensors may travel as JSON or, as Triton's own client
 * sends and asks for them by default, as binary data (kserve-binary.ts); like Triton, the request's
 * content type is not read.
 */

const errorBody = z.strictObject({ error: z.string() });

/** The protocol's error body: `{"error": "..."}`. */
const kserveErrors: ErrorFormat = (error) => ({
  status: error.status,
  body: { error: error.message } satisfies z.infer<typeof errorBody>,
});

const VERSION = '1';

const parameters = z.record(z.string(), z.unknown()).optional();
const inferRequest = z
  .object({
    id: z.string().optional(),
    parameters,
    inputs: z
      .array(
        z
          .object({
            name: z.string({ error: 'each input needs a name' }),
            shape: z.array(z.number().int().min(0), { error: 'each input needs a shape: a list of sizes' }),
            datatype: z.string({ error: 'each input needs a datatype' }),
            parameters,
            data: z.array(z.unknown(), { error: 'each input needs data: a list (row-major, may be nested)' }),
          })
          .strict(),
        { error: 'inputs must be a list of tensors' },
      )
      .length(1, 'send exactly one input tensor: the texts, datatype BYTES'),
    outputs: z.array(z.object({ name: z.string(), parameters }).strict()).optional(),
  })
  .strict();

const tensorMetadata = z.strictObject({ name: z.string(), datatype: z.string(), shape: z.array(z.number().int()) });
const modelMetadata = z.strictObject({
  name: z.string(),
  versions: z.array(z.string()),
  platform: z.string(),
  inputs: z.array(tensorMetadata),
  outputs: z.array(tensorMetadata),
  parameters: z.strictObject({
    labels: z.array(z.string()).optional(),
    revision: z.string().optional(),
    weights_sha256: z.string().optional(),
  }),
});
const inferResponse = z.strictObject({
  model_name: z.string(),
  model_version: z.string(),
  id: z.string().optional(),
  outputs: z.array(
    z.union([
      z.strictObject({
        name: z.string(),
        datatype: z.literal('FP32'),
        shape: z.array(z.number().int()),
        data: z.array(z.number()),
      }),
      z
        .strictObject({
          name: z.string(),
          datatype: z.literal('BYTES'),
          shape: z.array(z.number().int()),
          data: z.array(z.string()),
        })
        .meta({
          description:
            'an output asked for with parameters.classification k: per row, the k largest as "value:index:label"',
        }),
      z
        .strictObject({
          name: z.string(),
          datatype: z.enum(['FP32', 'BYTES']),
          shape: z.array(z.number().int()),
          parameters: z.strictObject({ binary_data_size: z.number().int() }),
        })
        .meta({ description: 'an output sent as binary data, after the JSON header' }),
    ]),
  ),
});
const serverMetadata = z.strictObject({ name: z.string(), version: z.string(), extensions: z.array(z.string()) });

/** The shapes of this protocol's bodies, for the OpenAPI document. */
export const kserveSchemas = {
  serverMetadata,
  live: z.strictObject({ live: z.boolean() }),
  ready: z.strictObject({ ready: z.boolean() }),
  modelReady: z.strictObject({ name: z.string(), ready: z.boolean() }),
  modelMetadata,
  inferRequest,
  inferResponse,
  error: errorBody,
};

type Kind = 'classifier' | 'embedding';

function kindOf(m: ServedModel): Kind | undefined {
  if (m.task === 'text-classification' || m.task === 'zero-shot-classification') return 'classifier';
  if (m.tasks.includes('feature-extraction')) return 'embedding';
  return undefined;
}

/** Output tensors a model offers, and the default one. */
function outputsOf(m: ServedModel): string[] {
  return kindOf(m) === 'classifier' ? ['probabilities', 'logits'] : ['embeddings'];
}

function tritonModel(m: ServedModel): TritonModel {
  const kind = kindOf(m);
  return {
    model: m,
    version: VERSION,
    outputs: kind ? outputsOf(m) : [],
    width: kind === 'classifier' ? (m.labels?.length ?? -1) : -1,
  };
}

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

type Action = 'metadata' | 'ready' | 'infer' | 'config' | 'stats';

/** `/v2/models/<name>[/versions/<v>][/ready|/infer|/config|/stats]`, and `/v2/models/stats`: the name may itself hold slashes. */
function parsePath(req: Request): { name: string; version?: string; action: Action } {
  let path = wildcardPath(req, 'path');
  if (path === 'stats') return { name: '', action: 'stats' };
  let action: Action = 'metadata';
  for (const suffix of ['ready', 'infer', 'config', 'stats'] as const) {
    if (path.endsWith(`/${suffix}`)) {
      action = suffix;
      path = path.slice(0, -suffix.length - 1);
    }
  }
  const versioned = /^(.+)\/versions\/([^/]+)$/.exec(path);
  return versioned ? { name: versioned[1], version: versioned[2], action } : { name: path, action };
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
    if ((params.priority as number) > 1) out.priority = 'batch';
  }
  return out;
}

export function kserveRoutes(
  router: IRouter,
  { config, service, registry, snapshot, admission, logger }: ProtocolParts & { snapshot: Snapshot },
): void {
  const served = (name: string): ServedModel => {
    const m = registry.get(name);
    if (!m)
      throw new ApiError(
        'not_found',
        `model ${name} is not served; served models: ${
          registry
            .served()
            .map((s) => s.id)
            .join(', ') || '(none)'
        }`,
      );
    return m;
  };
  const checkVersion = (version?: string) => {
    if (version !== undefined && version !== VERSION)
      throw new ApiError('not_found', `model version ${version} is not served; the only version is ${VERSION}`);
  };

  router.get('/v2', (_req, res) => {
    res.json({ name: 'tserve', version: '0.1.0', extensions: ['binary_tensor_data'] } satisfies z.infer<
      typeof serverMetadata
    >);
  });
  router.get('/v2/health/live', (_req, res) => {
    res.json({ live: true });
  });
  router.get('/v2/health/ready', (_req, res) => {
    const snap = snapshot();
    // A model scaled to zero counts, as in /ready: the server takes the request that wakes its worker.
    const ready =
      snap.redisHealthy &&
      snap.breaker !== 'open' &&
      snap.models.some((m) => m.state === 'served' || m.state === 'idle');
    res.status(ready ? 200 : 503).json({ ready });
  });

  router.get('/v2/models/*path', (req, res) => {
    const { name, version, action } = parsePath(req);
    checkVersion(version);
    if (action === 'infer') throw new ApiError('validation', 'inference is POST /v2/models/<name>/infer');
    if (action === 'stats') {
      const models = name === '' ? registry.served() : [served(name)];
      res.json({ model_stats: models.map((m) => modelStats(tritonModel(m))) } satisfies Statistics);
      return;
    }
    if (action === 'config') {
      res.json(modelConfig(tritonModel(served(name))));
      return;
    }
    if (action === 'ready') {
      const m = registry.get(name);
      if (!m && !registry.starting(name) && !registry.taskOf(name))
        throw new ApiError('not_found', `model ${name} is not served`);
      res.status(m ? 200 : 503).json({ name, ready: Boolean(m) });
      return;
    }
    const m = served(name);
    const kind = kindOf(m);
    const { outputs, width } = tritonModel(m);
    res.json({
      name: m.id,
      versions: [VERSION],
      platform: 'onnxruntime_onnx',
      inputs: [{ name: 'text', datatype: 'BYTES', shape: [-1] }],
      outputs: outputs.map((output) => ({ name: output, datatype: 'FP32', shape: [-1, width] })),
      parameters: {
        ...(kind === 'classifier' ? { labels: m.labels ?? [] } : {}),
        ...(m.weights.revision ? { revision: m.weights.revision } : {}),
        ...(m.weights.sha256 ? { weights_sha256: m.weights.sha256 } : {}),
      },
    } satisfies z.infer<typeof modelMetadata>);
  });

  const modelOfInfer = (req: Request) => {
    const { name, action } = parsePath(req);
    return action === 'infer' ? name : undefined;
  };
  router.post('/v2/models/*path', admission.beforeBody(modelOfInfer), rawBody(config), async (req, res) => {
    const { name, version, action } = parsePath(req);
    if (action !== 'infer')
      throw new ApiError('not_found', `no route for POST ${req.path}; inference is POST /v2/models/<name>/infer`);
    checkVersion(version);
    const parsed = inferRequest.safeParse(
      readInferBody(Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0), req.get(HEADER_LENGTH)),
    );
    if (!parsed.success) throw new ApiError('validation', describeIssues(parsed.error));
    const body = parsed.data;
    const { timeoutMs, priority } = controls(body.parameters);
    const m = registry.get(name) ?? (await servedModel(service, req, res, name, timeoutMs));
    const kind = kindOf(m);
    if (!kind)
      throw new ApiError(
        'validation',
        `model ${name} serves ${m.task}; the v2 protocol here serves classifiers and embedding models`,
      );

    const [input] = body.inputs;
    if (input.datatype !== 'BYTES')
      throw new ApiError(
        'validation',
        `input ${input.name}: datatype must be BYTES (the texts), not ${input.datatype}`,
      );
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

    const offered = outputsOf(m);
    const wanted = body.outputs?.map((o) => o.name) ?? [offered[0]];
    const unknown = wanted.filter((w) => !offered.includes(w));
    if (unknown.length)
      throw new ApiError(
        'validation',
        `unknown output(s) ${unknown.join(', ')}; model ${name} offers ${offered.join(', ')}`,
      );
    const counts = new Map(wanted.map((output) => [output, classCount(body.outputs?.find((o) => o.name === output))]));
    if (kind === 'embedding' && [...counts.values()].some((k) => k !== undefined))
      throw new ApiError(
        'validation',
        `parameters.classification applies to a classifier's outputs; model ${name} answers embeddings`,
      );

    const call = (output: string, i: number, parameters: Record<string, unknown>) =>
      runRouteCall(service, req, res, {
        part: i > 0 ? output : undefined,
        model: m.id,
        task: kind === 'classifier' ? 'text-classification' : 'feature-extraction',
        inputs: texts,
        parameters,
        timeoutMs,
        priority,
      });
    // A classifier's output asked for with `classification` answers its top classes instead of the tensor.
    const classifierTensor = (output: string, rows: number[][]): OutputTensor => {
      const k = counts.get(output);
      return k === undefined ? tensor(output, rows) : classes(output, rows, m.labels ?? [], k);
    };
    let tensors: OutputTensor[];
    if (kind === 'embedding') {
      tensors = [tensor('embeddings', (await call('embeddings', 0, {})).outputs as number[][])];
    } else if (wanted.length > 1 && m.scoreFunction) {
      // Both outputs from one model run: the probabilities are the model's default function of its logits.
      const logits = classifierRows(m, (await call('logits', 0, classifierParameters('logits'))).outputs);
      const scoreFunction = m.scoreFunction;
      const byOutput = {
        logits,
        probabilities: logits.map((row) => Array.from(applyScoreFunction(scoreFunction, row))),
      };
      tensors = wanted.map((output) => classifierTensor(output, byOutput[output as keyof typeof byOutput]));
    } else {
      tensors = await Promise.all(
        wanted.map(async (output, i) => {
          const result = await call(output, i, classifierParameters(output));
          return classifierTensor(output, classifierRows(m, result.outputs));
        }),
      );
    }
    // An output's own binary_data decides, else the request's binary_data_output (Triton's client sets it when it names no outputs).
    const binary = (output: string) =>
      (body.outputs?.find((o) => o.name === output)?.parameters?.binary_data ?? body.parameters?.binary_data_output) ===
      true;
    const answer = writeInferResponse(
      { model_name: m.id, model_version: VERSION, ...(body.id !== undefined ? { id: body.id } : {}), outputs: tensors },
      binary,
    );
    if (answer.headerLength !== undefined)
      res.set(HEADER_LENGTH, String(answer.headerLength)).type('application/octet-stream');
    else res.type('application/json');
    res.send(answer.body);
  });

  router.use('/v2', errorHandler(logger, kserveErrors));
}
