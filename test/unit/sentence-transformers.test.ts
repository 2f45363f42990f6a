import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { readSentenceTransformers } from '../../apps/worker/src/model/sentence-transformers.ts';

function folder(files: Record<string, unknown>): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-st-'));
  for (const [name, content] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    fs.writeFileSync(path.join(dir, name), JSON.stringify(content));
  }
  return dir;
}

describe("a sentence-transformers folder's files", () => {
  it('a folder without them has no prompts and no SPLADE pooling', () => {
    assert.deepEqual(readSentenceTransformers(folder({})), { prompts: {} });
  });

  it('reads the prompts and the default prompt name, leaving out what is not text', () => {
    const dir = folder({
      'config_sentence_transformers.json': { prompts: { query: 'query: ', bad: 3 }, default_prompt_name: 'query' },
    });
    assert.deepEqual(readSentenceTransformers(dir), { prompts: { query: 'query: ' }, defaultPromptName: 'query' });
  });

  it("a SparseEncoder's modules.json gives SPLADE pooling: its module's config, else sentence-transformers' defaults", () => {
    const modules = [
      { idx: 0, path: '', type: 'sentence_transformers.sparse_encoder.models.MLMTransformer' },
      { idx: 1, path: '1_SpladePooling', type: 'sentence_transformers.sparse_encoder.models.SpladePooling' },
    ];
    assert.deepEqual(readSentenceTransformers(folder({ 'modules.json': modules })).splade, {
      strategy: 'max',
      activation: 'relu',
    });
    const own = { pooling_strategy: 'sum', activation_function: 'log1p_relu' };
    assert.deepEqual(
      readSentenceTransformers(folder({ 'modules.json': modules, '1_SpladePooling/config.json': own })).splade,
      { strategy: 'sum', activation: 'log1p_relu' },
    );
    // A dense model's modules (Transformer, Pooling) are not sparse.
    const dense = [{ idx: 1, path: '1_Pooling', type: 'sentence_transformers.models.Pooling' }];
    assert.equal(readSentenceTransformers(folder({ 'modules.json': dense })).splade, undefined);
  });
});
