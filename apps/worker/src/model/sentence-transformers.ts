import fs from 'node:fs';
import path from 'node:path';

/**
 * What a sentence-transformers folder says beside config.json: its prompts
 * (`config_sentence_transformers.json`) and, for a SparseEncoder, how its masked-LM logits are
 * pooled into a sparse vector (`modules.json` naming SpladePooling, whose own config.json gives
 * the pooling and activation).
 */

/** SPLADE pooling: log(1 + activation(logits)) per vocabulary entry, over the sequence's tokens. */
export interface Splade {
  strategy: 'max' | 'sum';
  /** log1p_relu applies log(1 + x) once more. */
  activation: 'relu' | 'log1p_relu';
}

export interface SentenceTransformersFolder {
  /** Named prompts: text put before an input. */
  prompts: Record<string, string>;
  defaultPromptName?: string;
  /** Present for a SparseEncoder's folder. */
  splade?: Splade;
}

/** The folder's files this reads, fetched beside a hub model's weights where it has them. */
export const SENTENCE_TRANSFORMERS_FILES = ['config_sentence_transformers.json', 'modules.json'];

function readJson(file: string): unknown {
  return fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : undefined;
}

const object = (v: unknown): Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};

/** Reads a model folder's sentence-transformers files; a folder without them has no prompts and no SPLADE head. */
export function readSentenceTransformers(dir: string): SentenceTransformersFolder {
  const config = object(readJson(path.join(dir, 'config_sentence_transformers.json')));
  const prompts = Object.fromEntries(
    Object.entries(object(config.prompts)).filter((entry): entry is [string, string] => typeof entry[1] === 'string'),
  );
  const defaultPromptName = typeof config.default_prompt_name === 'string' ? config.default_prompt_name : undefined;
  const modules = readJson(path.join(dir, 'modules.json'));
  const pooling = (Array.isArray(modules) ? modules : [])
    .map(object)
    .find((m) => typeof m.type === 'string' && m.type.endsWith('.SpladePooling'));
  let splade: Splade | undefined;
  if (pooling) {
    // sentence-transformers' defaults, where the module's folder (not always fetched) says nothing.
    const own = object(readJson(path.join(dir, typeof pooling.path === 'string' ? pooling.path : '', 'config.json')));
    splade = {
      strategy: own.pooling_strategy === 'sum' ? 'sum' : 'max',
      activation: own.activation_function === 'log1p_relu' ? 'log1p_relu' : 'relu',
    };
  }
  return { prompts, ...(defaultPromptName ? { defaultPromptName } : {}), ...(splade ? { splade } : {}) };
}
