import { ApiError, BULK, type Priority } from '@tserve/contract';
import type { DepthExchange } from '@tserve/queue';

/**
 * The overload half of admission: how many requests a model may have waiting, and how large one
 * request may be. Pure decisions on numbers, so that they are tested without Redis; `admission.ts`
 * asks them, and `QueueDepth` keeps the numbers they are asked about.
 */

export interface OverloadLimits {
  /** MAX_QUEUE_DEPTH: requests a model may have accepted and not yet answered, over all gateways. */
  maxQueueDepth: number;
  /** BATCH_QUEUE_SHARE: the share of that depth open to bulk requests. */
  batchQueueShare: number;
  /** MAX_INPUTS_PER_REQUEST: inputs, and model sequences, one request may carry. */
  maxInputsPerRequest: number;
}

/** The depth at which a class is refused: batch work first, so that interactive callers still get in under overload. */
export function depthLimit(
  limits: Pick<OverloadLimits, 'maxQueueDepth' | 'batchQueueShare'>,
  priority: Priority,
): number {
  return priority === BULK ? Math.floor(limits.maxQueueDepth * limits.batchQueueShare) : limits.maxQueueDepth;
}

/**
 * The 503 for a request that finds its model's queue full for its class; undefined if it may enter.
 * A request sent as `pieces` (a list larger than a job) needs room for each of them.
 */
export function depthRefusal(
  limits: OverloadLimits,
  model: string,
  depth: number,
  priority: Priority,
  pieces = 1,
): ApiError | undefined {
  if (depth + pieces - 1 < depthLimit(limits, priority)) return undefined;
  const room = pieces > 1 ? `, and this request would add ${pieces} pieces` : '';
  return new ApiError(
    'overloaded',
    `model ${model} has ${depth} requests waiting${room}${priority === BULK ? ' (batch class refused first)' : ''}; retry shortly`,
    1,
  );
}

/**
 * The 413 for a request with more inputs, or more model sequences (pairs, candidate labels,
 * sentences), than one request may carry; undefined if it may enter.
 */
export function sizeRefusal(limits: OverloadLimits, inputs: number, sequences: number): ApiError | undefined {
  const max = limits.maxInputsPerRequest;
  if (inputs <= max && sequences <= max) return undefined;
  const what =
    sequences > inputs
      ? `${sequences} model sequences (${inputs} input(s) × their pairs, labels or sentences)`
      : `${inputs} inputs`;
  return new ApiError(
    'payload_too_large',
    `${what} in one request; at most ${max} are accepted (MAX_INPUTS_PER_REQUEST)`,
  );
}

/**
 * The overload limits a model's requests are held to, and the depth they are checked against: one
 * question before a request's body is read, one after. Only the queues of models served or
 * configured (MODELS) are bounded (`bound`, which the model registry calls as it refreshes): a
 * request for any other model is told why by routing, not that its queue is full.
 */
export class Overload {
  constructor(
    readonly limits: OverloadLimits,
    readonly depth: QueueDepth,
    private bounded: { has(model: string): boolean } = new Set<string>(),
  ) {}

  /** The models whose queues are bounded from now: those served or configured. */
  bound(models: Iterable<string>): void {
    this.bounded = new Set(models);
  }

  /** Before the body: the 503 where the model's queue is full for the request's class. */
  beforeBody(model: string, priority: Priority): ApiError | undefined {
    return this.queueFull(model, priority, 1);
  }

  /**
   * Once the body is read: the 413 for a request too large, else the 503 where the queue, which may
   * have filled while the body arrived, has no room for it (for each of its `pieces`).
   */
  afterBody(
    model: string,
    priority: Priority,
    size: { inputs: number; sequences: number; pieces?: number },
  ): ApiError | undefined {
    return sizeRefusal(this.limits, size.inputs, size.sequences) ?? this.queueFull(model, priority, size.pieces ?? 1);
  }

  private queueFull(model: string, priority: Priority, pieces: number): ApiError | undefined {
    if (!this.bounded.has(model)) return undefined;
    return depthRefusal(this.limits, model, this.depth.of(model), priority, pieces);
  }
}

/**
 * Bytes of request bodies this gateway holds, counted as they are received (not as declared: a
 * client that declares a large body and sends none of it holds nothing) and released when the
 * request is answered. The queue depth bounds requests, not bytes: at MAX_BODY_BYTES each, a few
 * thousand bodies in flight would outgrow the gateway's heap.
 */
export class BodyBudget {
  private heldBytes = 0;

  constructor(private readonly maxBytes: number) {}

  /** The bytes held now. */
  get held(): number {
    return this.heldBytes;
  }

  /** Whether no more body bytes fit: a new request is refused before its body is read. */
  get full(): boolean {
    return this.heldBytes >= this.maxBytes;
  }

  /**
   * A hold for one request's body: `add` counts bytes as they arrive (false if they do not fit; a
   * lone body always fits), `release` gives them all back (safe to call twice).
   */
  hold(): { add: (bytes: number) => boolean; release: () => void } {
    let mine = 0;
    let released = false;
    return {
      add: (bytes) => {
        if (released) return true;
        if (this.heldBytes > mine && this.heldBytes + bytes > this.maxBytes) return false;
        mine += bytes;
        this.heldBytes += bytes;
        return true;
      },
      release: () => {
        if (released) return;
        released = true;
        this.heldBytes -= mine;
      },
    };
  }

  /** The 503 for a body that does not fit. */
  refusal(): ApiError {
    return new ApiError(
      'overloaded',
      `this gateway holds ${(this.heldBytes / 1e6).toFixed(1)} MB of request bodies, its most (MAX_BODIES_BYTES); retry shortly`,
      1,
    );
  }
}

/** The models whose depth is shared: those served, and those configured (MODELS) with no worker yet, whose backlog is what wakes one. */
export interface SharedModels {
  servedOrConfigured(): string[];
}

/**
 * Requests accepted and not yet answered, per model: this gateway's own, counted exactly, plus
 * what the other gateways reported at the last exchange. The counts are exchanged on a timer, not
 * per request, so the request path stays free of Redis calls.
 */
export class QueueDepth {
  /** This gateway's requests per model that are accepted and not yet answered. */
  private readonly outstanding = new Map<string, number>();
  /** What the other gateways last reported of their outstanding requests, per model. */
  private peers = new Map<string, number>();
  private timer?: NodeJS.Timeout;

  constructor(private readonly exchange: Pick<DepthExchange, 'exchange'>) {}

  /** The model's depth over all gateways. */
  of(model: string): number {
    return this.own(model) + (this.peers.get(model) ?? 0);
  }

  /** This gateway's requests for the model, accepted and not yet answered. */
  own(model: string): number {
    return this.outstanding.get(model) ?? 0;
  }

  /** A request for the model was accepted: it counts towards the depth until the returned `leave` is called. */
  enter(model: string): () => void {
    this.outstanding.set(model, (this.outstanding.get(model) ?? 0) + 1);
    let left = false;
    return () => {
      if (left) return;
      left = true;
      const remaining = (this.outstanding.get(model) ?? 1) - 1;
      if (remaining > 0) this.outstanding.set(model, remaining);
      else this.outstanding.delete(model);
    };
  }

  /**
   * Reports this gateway's counts for `models` (zeros included, so that an old count is
   * overwritten) and takes the others' in the same round trip.
   */
  async share(models: string[]): Promise<void> {
    // And any model this gateway holds requests for: one waiting for its first worker, which no worker announces yet.
    const mine = new Map(
      [...new Set([...models, ...this.outstanding.keys()])].map((id) => [id, this.outstanding.get(id) ?? 0]),
    );
    this.peers = await this.exchange.exchange(mine);
  }

  /** Shares every `periodMs` the counts of `models`, and of those it holds requests for. */
  async start(models: SharedModels, periodMs: number): Promise<void> {
    // A failed exchange keeps the peers' last counts; the model registry reports Redis being down.
    const share = () => this.share(models.servedOrConfigured()).catch(() => {});
    await share();
    this.timer = setInterval(() => void share(), periodMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
