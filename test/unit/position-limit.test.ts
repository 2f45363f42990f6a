import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { positionLimit } from '../../apps/worker/src/model/model.ts';

describe('positionLimit (the longest sequence a position table indexes)', () => {
  it("is the table's size for BERT-like models, and unknown where the config is silent", () => {
    assert.equal(positionLimit({ model_type: 'bert', max_position_embeddings: 512, pad_token_id: 0 }), 512);
    assert.equal(positionLimit({ model_type: 'distilbert', max_position_embeddings: 512 }), 512);
    assert.equal(positionLimit({ model_type: 'bert' }), undefined);
  });

  it('leaves out the rows up to the padding index where positions start after it (RoBERTa, XLM-R, CamemBERT)', () => {
    assert.equal(positionLimit({ model_type: 'roberta', max_position_embeddings: 514, pad_token_id: 1 }), 512);
    assert.equal(positionLimit({ model_type: 'xlm-roberta', max_position_embeddings: 8194, pad_token_id: 1 }), 8192);
    assert.equal(
      positionLimit({ model_type: 'camembert', max_position_embeddings: 514 }),
      512,
      'their padding index is 1 unless stated',
    );
  });
});
