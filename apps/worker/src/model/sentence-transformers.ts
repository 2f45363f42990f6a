import fs from 'node:fs';
import path from 'node:path';

/**
 * What a sentence-transformers folder says beside config.json, read as sentence-transformers reads
 * it: its prompts (`config_sentence_transformers.json`); its modules (`modules.json`), in order,
 * each with its own config: how the transformer's token vectors become one embedding (Pooling,
 * Dense, Normalize) or, for a SparseEncoder, a sparse vector (SpladePooling); and its
 * Transformer's `sentence_bert_config.json` (the length it cuts inputs to, lower-casing).
 */

/** SPLADE pooling: log(1 + activation(logits)) per vocabulary entry, over the sequence's tokens. */
export interface Splade {
  strategy: 'max' | 'sum';
  /** log1p_relu applies log(1 + x) once more. */
  activation: 'relu' | 'log1p_relu';
}

/** sentence-transformers' pooling modes, in the order its legacy config keys concatenate them. */
const POOLING_MODES = ['cls', 'max', 'mean', 'mean_sqrt_len_tokens', 'weightedmean', 'lasttoken'] as const;
export type PoolingMode = (typeof POOLING_MODES)[number];

/** The legacy boolean keys of a Pooling config, each naming one mode. */
const LEGACY_POOLING_KEYS: Record<string, PoolingMode> = {
  pooling_mode_cls_token: 'cls',
  pooling_mode_max_tokens: 'max',
  pooling_mode_mean_tokens: 'mean',
  pooling_mode_mean_sqrt_len_tokens: 'mean_sqrt_len_tokens',
  pooling_mode_weightedmean_tokens: 'weightedmean',
  pooling_mode_lasttoken: 'lasttoken',
};

/** A SentenceTransformer's modules after its transformer: how its token vectors become its embedding. */
export interface SentenceHead {
  /** One or more modes, whose vectors are concatenated in this order. */
  pooling: PoolingMode[];
  /** false: a prompt's tokens are left out of the pooling (INSTRUCTOR-style models). */
  includePrompt: boolean;
  /** The Dense modules after the pooling (their paths): the ONNX export must run them (its sentence_embedding output). */
  dense: string[];
  /** A Normalize module ends the modules: the embedding is L2-normalised. */
  normalize: boolean;
}

export interface SentenceTransformersFolder {
  /** Named prompts: text put before an input. */
  prompts: Record<string, string>;
  defaultPromptName?: string;
  /** Present for a SparseEncoder's folder. */
  splade?: Splade;
  /** Present for a SentenceTransformer's folder (modules.json with a Pooling module). */
  head?: SentenceHead;
  /** sentence_bert_config.json's max_seq_length: the length inputs are cut to, special tokens included. */
  maxSeqLength?: number;
  /** sentence_bert_config.json's do_lower_case: inputs are lower-cased before tokenizing. */
  doLowerCase?: boolean;
}

/** A folder that asks for what cannot be served: the message names the module. */
export class SentenceTransformersError extends Error {}

/**
 * The folder's files this reads, fetched beside a hub model's weights where it has them. A module's
 * own folder is named by modules.json, unknown until it is read: these are the names sentence-
 * transformers gives them when it saves a model (`<index>_<module>`), for the modules read here.
 */
export const SENTENCE_TRANSFORMERS_FILES = [
  'config_sentence_transformers.json',
  'modules.json',
  'sentence_bert_config.json',
  '1_Pooling/config.json',
  '2_Dense/config.json',
  '3_Dense/config.json',
  '4_Dense/config.json',
  '1_SpladePooling/config.json',
];

function readJson(file: string): unknown {
  return fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : undefined;
}

const object = (v: unknown): Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};

/** A module of modules.json: its class's name (the last part of its dotted type), its folder and its own config. */
interface Module {
  kind: string;
  type: string;
  path: string;
  config: Record<string, unknown> | undefined;
}

/** The modules sentence-transformers' own SentenceTransformer and SparseEncoder are made of, as served here. */
const KNOWN = new Set(['Transformer', 'MLMTransformer', 'Pooling', 'Dense', 'Normalize', 'SpladePooling']);

function readModules(dir: string): Module[] | undefined {
  const list = readJson(path.join(dir, 'modules.json'));
  if (list === undefined) return undefined;
  return (Array.isArray(list) ? list : []).map(object).map((m) => {
    const type = typeof m.type === 'string' ? m.type : '(no type)';
    const folder = typeof m.path === 'string' ? m.path : '';
    return {
      kind: type.split('.').pop() ?? type,
      type,
      path: folder,
      config: folder === '' ? undefined : (readJson(path.join(dir, folder, 'config.json')) as Record<string, unknown>),
    };
  });
}

const named = (m: Module) => `module ${m.path || '(the folder itself)'} (${m.type})`;

/** The modes of a Pooling config: `pooling_mode` (a name or a list), else the legacy booleans; mean where none is set. */
function poolingModes(m: Module, config: Record<string, unknown>): PoolingMode[] {
  const given = config.pooling_mode;
  const modes =
    given !== undefined && given !== null
      ? (Array.isArray(given) ? given : [given]).map(String)
      : Object.entries(LEGACY_POOLING_KEYS)
          .filter(([key]) => config[key] === true)
          .map(([, mode]) => mode);
  for (const mode of modes)
    if (!(POOLING_MODES as readonly string[]).includes(mode))
      throw new SentenceTransformersError(
        `${named(m)} asks for pooling "${mode}"; the modes served are ${POOLING_MODES.join(', ')}`,
      );
  return modes.length ? (modes as PoolingMode[]) : ['mean'];
}

/** How a SentenceTransformer's token vectors become its embedding, from its modules after the transformer. */
function sentenceHead(modules: Module[]): SentenceHead | undefined {
  const head: SentenceHead = { pooling: [], includePrompt: true, dense: [], normalize: false };
  for (const m of modules) {
    if (!KNOWN.has(m.kind))
      throw new SentenceTransformersError(
        `${named(m)} is not served: tserve runs a sentence-transformers model's Transformer, Pooling, Dense and Normalize modules (and a SparseEncoder's SpladePooling)`,
      );
    if ((m.kind === 'Transformer' || m.kind === 'MLMTransformer') && m.path !== '')
      throw new SentenceTransformersError(
        `${named(m)} keeps its transformer in its own folder; tserve loads the model (config.json, onnx/) from the model's folder itself`,
      );
    if (m.kind === 'Pooling') {
      if (head.pooling.length)
        throw new SentenceTransformersError(`${named(m)} is a second Pooling module; one is served`);
      if (m.config === undefined)
        throw new SentenceTransformersError(`${named(m)} has no config.json: its pooling mode is unknown`);
      head.pooling = poolingModes(m, m.config);
      head.includePrompt = m.config.include_prompt !== false;
    } else if (m.kind === 'Dense') {
      if (!head.pooling.length)
        throw new SentenceTransformersError(
          `${named(m)} comes before any Pooling module; tserve runs Dense on a pooled vector`,
        );
      head.dense.push(m.path);
    } else if (m.kind === 'Normalize') head.normalize = true;
  }
  return head.pooling.length ? head : undefined;
}

/** Reads a model folder's sentence-transformers files; a folder without them has no prompts, no head and no SPLADE pooling. */
export function readSentenceTransformers(dir: string): SentenceTransformersFolder {
  const config = object(readJson(path.join(dir, 'config_sentence_transformers.json')));
  const prompts = Object.fromEntries(
    Object.entries(object(config.prompts)).filter((entry): entry is [string, string] => typeof entry[1] === 'string'),
  );
  const defaultPromptName = typeof config.default_prompt_name === 'string' ? config.default_prompt_name : undefined;
  const modules = readModules(dir) ?? [];
  const pooling = modules.find((m) => m.kind === 'SpladePooling');
  let splade: Splade | undefined;
  if (pooling) {
    // sentence-transformers' defaults, where the module's folder (not always fetched) says nothing.
    const own = object(pooling.config);
    splade = {
      strategy: own.pooling_strategy === 'sum' ? 'sum' : 'max',
      activation: own.activation_function === 'log1p_relu' ? 'log1p_relu' : 'relu',
    };
  }
  // A CrossEncoder's folder may list modules too: its architecture (a sequence classifier) says what it is.
  const head = splade || config.model_type === 'CrossEncoder' ? undefined : sentenceHead(modules);
  const bert = object(readJson(path.join(dir, 'sentence_bert_config.json')));
  const maxSeqLength =
    typeof bert.max_seq_length === 'number' && bert.max_seq_length > 0 ? bert.max_seq_length : undefined;
  return {
    prompts,
    ...(defaultPromptName ? { defaultPromptName } : {}),
    ...(splade ? { splade } : {}),
    ...(head ? { head } : {}),
    ...(maxSeqLength !== undefined ? { maxSeqLength } : {}),
    ...(bert.do_lower_case === true ? { doLowerCase: true } : {}),
  };
}

interface Normalizer {
  type?: string;
  lowercase?: boolean;
  normalizers?: Normalizer[];
}

function lowercases(normalizer: Normalizer | null | undefined): boolean {
  if (!normalizer) return false;
  if (normalizer.type === 'Lowercase') return true;
  if (normalizer.type === 'BertNormalizer') return normalizer.lowercase !== false;
  if (normalizer.type === 'Sequence') return (normalizer.normalizers ?? []).some(lowercases);
  return false;
}

/**
 * Whether a transformers.js tokenizer lower-cases already (its tokenizer.json's normalizer): there
 * do_lower_case changes nothing, and sentence-transformers adds no Lowercase of its own.
 */
export function tokenizerLowercases(tokenizer: unknown): boolean {
  const json = (tokenizer as { _tokenizer?: { tokenizer?: { normalizer?: Normalizer | null } } })._tokenizer?.tokenizer;
  return lowercases(json?.normalizer);
}
