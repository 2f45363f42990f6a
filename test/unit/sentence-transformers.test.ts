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
    const pooling = { pooling_mode_mean_tokens: true };
    assert.equal(
      readSentenceTransformers(folder({ 'modules.json': dense, '1_Pooling/config.json': pooling })).splade,
      undefined,
    );
  });

  const transformer = { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' };
  const poolingModule = { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' };
  const normalize = { idx: 2, name: '2', path: '2_Normalize', type: 'sentence_transformers.models.Normalize' };

  it("a SentenceTransformer's head: the pooling its config names (legacy keys or pooling_mode), Dense, Normalize, its length", () => {
    const dir = folder({
      'modules.json': [
        transformer,
        poolingModule,
        { idx: 2, path: '2_Dense', type: 'sentence_transformers.models.Dense' },
        { ...normalize, idx: 3, path: '3_Normalize' },
      ],
      '1_Pooling/config.json': { pooling_mode_cls_token: true, pooling_mode_max_tokens: true, include_prompt: false },
      'sentence_bert_config.json': { max_seq_length: 256, do_lower_case: true },
    });
    assert.deepEqual(readSentenceTransformers(dir), {
      prompts: {},
      head: { pooling: ['cls', 'max'], includePrompt: false, dense: ['2_Dense'], normalize: true },
      maxSeqLength: 256,
      doLowerCase: true,
    });
    const named = folder({
      'modules.json': [transformer, poolingModule],
      '1_Pooling/config.json': { embedding_dimension: 64, pooling_mode: 'lasttoken' },
    });
    assert.deepEqual(readSentenceTransformers(named).head, {
      pooling: ['lasttoken'],
      includePrompt: true,
      dense: [],
      normalize: false,
    });
    // No mode set: sentence-transformers' default, mean.
    const none = folder({ 'modules.json': [transformer, poolingModule], '1_Pooling/config.json': {} });
    assert.deepEqual(readSentenceTransformers(none).head?.pooling, ['mean']);
  });

  it('a folder that asks for what is not served is refused, naming the module', () => {
    const refused = (files: Record<string, unknown>, says: RegExp) =>
      assert.throws(() => readSentenceTransformers(folder(files)), says);
    refused(
      { 'modules.json': [transformer, { idx: 1, path: '1_CNN', type: 'sentence_transformers.models.CNN' }] },
      /module 1_CNN \(sentence_transformers\.models\.CNN\) is not served/,
    );
    refused({ 'modules.json': [transformer, poolingModule] }, /module 1_Pooling .* has no config\.json/);
    refused(
      { 'modules.json': [transformer, poolingModule], '1_Pooling/config.json': { pooling_mode: ['mean', 'median'] } },
      /asks for pooling "median"/,
    );
    refused(
      { 'modules.json': [{ ...transformer, path: '0_Transformer' }, poolingModule], '1_Pooling/config.json': {} },
      /module 0_Transformer .* keeps its transformer in its own folder/,
    );
  });

  it("a CrossEncoder's folder lists modules but is served by its architecture: no embedding head", () => {
    const dir = folder({
      'config_sentence_transformers.json': { model_type: 'CrossEncoder' },
      'modules.json': [
        transformer,
        { idx: 1, path: '1_LogitScore', type: 'sentence_transformers.cross_encoder.modules.LogitScore' },
      ],
    });
    assert.equal(readSentenceTransformers(dir).head, undefined);
  });
});
