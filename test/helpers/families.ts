/**
 * The replicas of the families beyond BERT (../shared/models/README.md, second half) and their
 * references, REFERENCE-families.json: sentence-transformers 6.0.1 and transformers 5.17 on torch
 * fp32 (`embedding`, `logit`, `scores`), and ONNX Runtime on each replica's q8 file, each input alone
 * (`embedding_q8`, `logit_q8`, `logits_q8`).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MODEL_DIR } from './processes.ts';

export const BGE = 'replica/bge-small-en-v1.5';
export const QWEN3 = 'replica/Qwen3-Embedding-0.6B';
export const GEMMA = 'replica/embeddinggemma-300m';
export const E5 = 'replica/multilingual-e5-small';
export const GTE = 'replica/gte-modernbert-base';
export const BGE_RERANKER = 'replica/bge-reranker-v2-m3';
export const DEBERTA_NLI = 'replica/deberta-v3-base-zeroshot-v2.0';

export const EMBEDDERS = [BGE, QWEN3, GEMMA, E5, GTE];
export const FAMILIES = [...EMBEDDERS, BGE_RERANKER, DEBERTA_NLI];

export interface EmbeddingCase {
  text: string;
  prompt_name: string | null;
  prompt: string | null;
  input_ids: number[];
  n_tokens: number;
  embedding: number[];
  embedding_q8: number[];
}

export interface RerankCase {
  query: string;
  documents: string[];
  results: Array<{
    index: number;
    input_ids: number[];
    n_tokens: number;
    logit: number;
    score: number;
    logit_q8: number;
    score_q8: number;
  }>;
}

export interface ZeroShotCase {
  sequence: string;
  candidate_labels: string[];
  multi_label: boolean;
  hypothesis_template: string;
  pairs: Array<{ label: string; input_ids: number[]; n_tokens: number; logits: number[]; logits_q8: number[] }>;
  labels: string[];
  scores: number[];
}

export function familyReference(): Record<string, { task: string; semantics: string; cases: any[] }> {
  return JSON.parse(fs.readFileSync(path.join(MODEL_DIR, 'REFERENCE-families.json'), 'utf8'));
}

export const cosine = (a: number[], b: number[]) => {
  let [ab, aa, bb] = [0, 0, 0];
  a.forEach((v, i) => {
    ab += v * b[i];
    aa += v * v;
    bb += b[i] * b[i];
  });
  return ab / Math.sqrt(aa * bb);
};

/**
 * A model folder of links to a replica's files and folders (its onnx/ files linked one by one, so a
 * worker may write its int8-row file beside them), with some files replaced: `edit` gets each JSON
 * file named in it and returns its new content.
 */
export function editedReplica(
  model: string,
  edits: Record<string, (json: any) => unknown>,
  options: { from?: string; onnx?: string[] } = {},
): { dir: string; remove: () => void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-family-'));
  const from = path.join(MODEL_DIR, options.from ?? model);
  const to = path.join(dir, model);
  /** Links `relative`'s entries; a folder holding an edited file is made, and its entries linked in turn. */
  const link = (relative: string) => {
    fs.mkdirSync(path.join(to, relative), { recursive: true });
    for (const entry of fs.readdirSync(path.join(from, relative), { withFileTypes: true })) {
      const name = path.join(relative, entry.name);
      if (name in edits) continue;
      const holdsEdit = Object.keys(edits).some((file) => file.startsWith(`${name}/`));
      if (entry.isDirectory() && (holdsEdit || name === 'onnx')) link(name);
      else if (!(name.startsWith('onnx/') && options.onnx && !options.onnx.includes(entry.name)))
        fs.symlinkSync(path.join(from, name), path.join(to, name));
    }
  };
  link('');
  for (const [file, edit] of Object.entries(edits)) {
    const original = path.join(from, file);
    const json: unknown = fs.existsSync(original) ? JSON.parse(fs.readFileSync(original, 'utf8')) : undefined;
    fs.mkdirSync(path.dirname(path.join(to, file)), { recursive: true });
    fs.writeFileSync(path.join(to, file), JSON.stringify(edit(json), null, 2));
  }
  return { dir, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}
