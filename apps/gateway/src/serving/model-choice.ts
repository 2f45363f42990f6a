import { ApiError } from '@tserve/contract';
import type { ModelRegistry } from './model-registry.js';
import { registryUnreachable, type ServedModel } from './served-models.js';

/**
 * Which model a route's request runs on, when the route needs a kind of model (an embedding model,
 * a classifier, a reranker) rather than naming one: the protocols that serve one model per kind
 * (TEI's, Cohere's rerank) choose here alike.
 */

/** The kind of model a route needs. */
export interface RouteKind {
  what: string;
  fits: (m: ServedModel) => boolean;
}
export const EMBEDDING: RouteKind = { what: 'an embedding model', fits: (m) => m.tasks.includes('feature-extraction') };
export const CLASSIFIER: RouteKind = {
  what: 'a sequence classifier',
  fits: (m) => m.tasks.includes('text-classification'),
};
export const RERANKER: RouteKind = {
  what: 'a reranker (a classifier with one label)',
  fits: (m) => m.tasks.includes('text-classification') && m.labels?.length === 1,
};
export const SPARSE: RouteKind = {
  what: 'a sparse model (a masked-LM model with SPLADE pooling)',
  fits: (m) => m.sparse,
};
export const ANY: RouteKind = { what: 'a model', fits: () => true };

/**
 * The model Infinity's clients name when their user named none: it stands for the only model of
 * the route's kind, as it does on Infinity.
 */
const INFINITY_UNNAMED = 'default/not-specified';

/** Chooses a route's model among the served ones. */
export class ModelChoice {
  constructor(
    private readonly registry: ModelRegistry,
    /** DEFAULT_MODEL: the model `POST /` serves, where set. */
    private readonly defaultId?: string,
  ) {}

  /** The model `POST /` serves, if there is one yet: DEFAULT_MODEL, or the only one served or configured. */
  defaultModel(): string | undefined {
    if (this.defaultId) return this.defaultId;
    const ids = this.registry.servedOrConfigured();
    return ids.length === 1 ? ids[0] : undefined;
  }

  /** The model `POST /` serves, or a 503/400 that says why there is none. */
  requireDefaultModel(): string {
    const model = this.defaultModel();
    if (model !== undefined) return model;
    const served = this.registry.served();
    if (served.length === 0) {
      if (!this.registry.healthy) throw registryUnreachable();
      throw new ApiError('unavailable', 'no worker is serving any model yet; retry shortly', 2);
    }
    throw new ApiError(
      'validation',
      `several models are served (${served.map((m) => m.id).join(', ')}); use POST /models/<model id> or set DEFAULT_MODEL`,
    );
  }

  /**
   * The model a request names (body `model`, `x-model`), or the only served one of its kind, or,
   * with none served at all, the only one configured (MODELS): scaled to zero, its kind is known
   * once a worker serves it.
   */
  pick(xModel: string | undefined, kind: RouteKind, named?: string): string {
    const { registry } = this;
    const asked = (named === INFINITY_UNNAMED ? undefined : named) ?? xModel;
    if (asked !== undefined) return asked;
    const fitting = registry.served().filter(kind.fits);
    if (fitting.length === 1) return fitting[0].id;
    const configured = registry.configured();
    if (registry.served().length === 0 && configured.length === 1) return configured[0];
    if (fitting.length === 0) {
      const served = registry.served().map((m) => m.id);
      throw new ApiError(
        'unavailable',
        `no served model is ${kind.what}${served.length ? ` (served: ${served.join(', ')})` : ''}`,
        2,
      );
    }
    throw new ApiError(
      'validation',
      `several served models are ${kind.what}: ${fitting.map((m) => m.id).join(', ')}; name one with a "model" field or x-model (a header, or gRPC metadata)`,
    );
  }

  /** The model a request's envelope names, or the only fitting one, before its body: for shedding and key permissions. */
  pickBeforeBody(xModel: string | undefined, kind: RouteKind): string | undefined {
    try {
      return this.pick(xModel, kind);
    } catch {
      return undefined;
    }
  }
}

/** The request's model (InferenceService.modelFor's), refused where it is not of the route's kind. */
export function checkKind<M extends { served: ServedModel }>(model: M, kind: RouteKind): M {
  const { served } = model;
  if (!kind.fits(served))
    throw new ApiError('validation', `model ${served.id} is not ${kind.what}; it serves ${served.tasks.join(', ')}`);
  return model;
}
