import type { IRouter, Request } from 'express';
import { z } from 'zod';
import { ApiError } from '@tserve/contract';
import type { ServedModel } from '../serving/served-models.js';
import type { Snapshot } from '../serving/snapshot.js';
import { errorHandler, type ErrorFormat } from '../http/http-errors.js';
import { wildcardPath, type ProtocolParts } from '../serving/envelope.js';
import { rawBody } from '../http/request-body.js';
import { infer } from './kserve-infer.js';
import { errorBody, modelMetadata, serverMetadata } from './kserve-schemas.js';
import { kindOf, modelConfig, modelStats, tritonModel, VERSION, type Statistics } from './kserve-triton.js';

/**
 * The KServe v2 / Open Inference Protocol over HTTP (what Triton speaks): health, server and model
 * metadata, and inference on a BYTES tensor of texts, answered with FP32 tensors: a classifier's
 * probabilities or logits in label order, an embedding model's embeddings. Model names hold a
 * slash (`replica/x`), sent as is or as %2F. Tensors may travel as JSON or, as Triton's own client
 * sends and asks for them by default, as binary data (kserve-binary.ts); like Triton, the request's
 * content type is not read. Inference itself is kserve-infer.ts.
 */

/** The protocol's error body: `{"error": "..."}`. */
const kserveErrors: ErrorFormat = (error) => ({
  status: error.status,
  body: { error: error.message } satisfies z.infer<typeof errorBody>,
});

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

/** A model's metadata: its input and output tensors. */
export function metadata(m: ServedModel): z.infer<typeof modelMetadata> {
  const kind = kindOf(m);
  const { outputs, width } = tritonModel(m);
  return {
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
  };
}

/** The server's metadata (the v2 protocol's `GET /v2`). */
export const SERVER_METADATA = {
  name: 'tserve',
  version: '0.1.0',
  extensions: ['binary_tensor_data'],
} satisfies z.infer<typeof serverMetadata>;

/** Whether the server is ready (`/v2/health/ready`): a model scaled to zero counts, as in /ready, since the server takes the request that wakes its worker. */
export function serverReady(snapshot: Snapshot): boolean {
  const snap = snapshot();
  return (
    snap.redisHealthy && snap.breaker !== 'open' && snap.models.some((m) => m.state === 'served' || m.state === 'idle')
  );
}

/** A served model by name, or the protocol's 404 naming those served. */
export function servedOrRefused(registry: ProtocolParts['registry'], name: string): ServedModel {
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
}

/** A model's readiness (`/v2/models/<name>/ready`): known but not yet served is not ready; unknown is a 404. */
export function modelReady(registry: ProtocolParts['registry'], name: string): boolean {
  const m = registry.get(name);
  if (!m && !registry.starting(name) && !registry.taskOf(name))
    throw new ApiError('not_found', `model ${name} is not served`);
  return Boolean(m);
}

export const checkVersion = (version?: string) => {
  if (version !== undefined && version !== VERSION)
    throw new ApiError('not_found', `model version ${version} is not served; the only version is ${VERSION}`);
};

export function kserveRoutes(router: IRouter, parts: ProtocolParts & { snapshot: Snapshot }): void {
  const { config, registry, snapshot, admission, logger } = parts;
  const served = (name: string) => servedOrRefused(registry, name);

  router.get('/v2', (_req, res) => {
    res.json(SERVER_METADATA);
  });
  router.get('/v2/health/live', (_req, res) => {
    res.json({ live: true });
  });
  router.get('/v2/health/ready', (_req, res) => {
    const ready = serverReady(snapshot);
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
      const ready = modelReady(registry, name);
      res.status(ready ? 200 : 503).json({ name, ready });
      return;
    }
    res.json(metadata(served(name)));
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
    await infer(parts, req, res, name);
  });

  router.use('/v2', errorHandler(logger, kserveErrors));
}
