import type { IRouter } from 'express';
import { ApiError } from '@tserve/contract';
import type { ProtocolParts } from '../serving/envelope.js';
import { CLASSIFIER, EMBEDDING, ModelChoice, RERANKER, SPARSE } from '../serving/model-choice.js';

/**
 * SageMaker's inference route, `POST /invocations`: the served model's own route, as TEI binds it
 * by the model's type (a reranker: /rerank; a classifier: /predict; a sparse model: /embed_sparse;
 * an embedding model: /embed), and for any other task `POST /` (the Inference API). The model is
 * DEFAULT_MODEL or the only one served; its health check, `GET /ping`, is /ready's (ops/health.ts).
 * Mounted before every other route: the request goes on to the route it is rewritten to.
 */
export function sagemakerRoutes(router: IRouter, parts: Pick<ProtocolParts, 'registry' | 'config'>): void {
  const choice = new ModelChoice(parts.registry, parts.config.DEFAULT_MODEL);
  router.post('/invocations', (req, _res, next) => {
    const id = choice.requireDefaultModel();
    const served = parts.registry.get(id);
    if (!served) throw new ApiError('unavailable', `model ${id} is not served yet; retry shortly`, 2);
    const route = RERANKER.fits(served)
      ? '/rerank'
      : CLASSIFIER.fits(served)
        ? '/predict'
        : SPARSE.fits(served)
          ? '/embed_sparse'
          : EMBEDDING.fits(served)
            ? '/embed'
            : '/';
    // The route picks its model as it would for a request that named it.
    if (route !== '/') req.headers['x-model'] ??= id;
    req.url = route + req.url.slice('/invocations'.length);
    next();
  });
}
