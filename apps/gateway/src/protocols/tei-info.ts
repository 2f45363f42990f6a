import type { z } from 'zod';
import { ApiError, batchWarning, type EmbeddingHead } from '@tserve/contract';
import type { ProtocolParts } from '../serving/envelope.js';
import type { ServedModel } from '../serving/served-models.js';
import { CLASSIFIER, RERANKER } from '../serving/model-choice.js';
import type { info } from './tei-schemas.js';

/** sentence-transformers' pooling modes by TEI's names for them, where TEI has one. */
const TEI_POOLING: Record<string, string> = { lasttoken: 'last_token' };

/** TEI's `model_type` for /info. */
function modelType(m: ServedModel, head: EmbeddingHead | undefined): z.infer<typeof info>['model_type'] {
  const id2label = Object.fromEntries((m.labels ?? []).map((label, i) => [String(i), label]));
  const label2id = Object.fromEntries((m.labels ?? []).map((label, i) => [label, i]));
  if (RERANKER.fits(m)) return { reranker: { id2label, label2id } };
  if (CLASSIFIER.fits(m)) return { classifier: { id2label, label2id } };
  const pooling = head ? head.pooling.map((mode) => TEI_POOLING[mode] ?? mode).join('+') : 'mean';
  return { embedding: { pooling: m.sparse ? 'splade' : pooling } };
}

/** How the model makes its embedding, where its sentence-transformers folder says: beside TEI's own fields. */
function sentenceTransformers(head: EmbeddingHead | undefined, maxLength: number) {
  if (!head) return {};
  return {
    sentence_transformers: {
      pooling: head.pooling,
      include_prompt: head.includePrompt,
      dense: head.dense,
      normalize: head.normalize,
      max_seq_length: maxLength,
      padding_side: head.paddingSide,
      prompts: head.prompts,
      default_prompt: head.defaultPrompt,
    },
  };
}

/** A served model as TEI's `/info` (and gRPC `Info`) describes it; 404 where no worker serves it. */
export function teiInfo(
  { config, registry }: Pick<ProtocolParts, 'config' | 'registry'>,
  id: string,
): z.infer<typeof info> {
  const m = registry.get(id);
  if (!m) throw new ApiError('not_found', `model ${id} is not served`);
  const smallest = (values: Array<number | undefined>) =>
    Math.min(...values.filter((v): v is number => v !== undefined));
  const head = m.workers.find((w) => w.embedding)?.embedding;
  const fallback = m.workers.find((w) => w.dtypeFallback)?.dtypeFallback;
  return {
    model_id: m.id,
    // TEI's model_sha is the hub revision (commit) served; null for a local folder, or while workers disagree.
    model_sha: m.weights.revision ?? null,
    model_weights_sha256: m.weights.sha256 ?? null,
    served_model_name: m.id,
    model_dtype: [...new Set(m.workers.map((w) => w.dtype))].join(','),
    ...(fallback ? { model_dtype_fallback: fallback } : {}),
    ...batchWarning(m.workers),
    model_type: modelType(m, head),
    ...sentenceTransformers(head, m.maxLength),
    ...(m.matryoshkaDimensions.length ? { matryoshka_dimensions: m.matryoshkaDimensions } : {}),
    task: m.task,
    tasks: m.tasks,
    max_concurrent_requests: config.MAX_QUEUE_DEPTH,
    max_input_length: m.maxLength,
    max_batch_tokens: smallest(m.workers.map((w) => w.batchMaxTokens)),
    max_batch_requests: smallest(m.workers.map((w) => w.batchMaxSize)),
    max_client_batch_size: config.MAX_INPUTS_PER_REQUEST,
    auto_truncate: false,
    tokenization_workers: m.workers.length,
    version: '0.1.0',
  };
}
