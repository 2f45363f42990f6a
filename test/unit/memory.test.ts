/**
 * Issue 50: the largest model call a worker's memory budget (WORKER_MEMORY_MB) leaves room for,
 * derived from the model's config alone.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  callBytes,
  HEADROOM_BYTES,
  heldBytes,
  limitsWithin,
  MemoryBudgetError,
  modelShape,
  parameterCount,
  restingBytes,
  RUNTIME_BYTES,
  type ModelShape,
} from '../../apps/worker/src/model/memory.ts';
import { planCalls } from '../../apps/worker/src/pipeline/runner.ts';

const MiB = 2 ** 20;

/** The configs' own field names (the replicas' config.json): BERT's, and DistilBERT's. */
const MINILM_CONFIG = {
  model_type: 'bert',
  hidden_size: 384,
  num_attention_heads: 12,
  num_hidden_layers: 6,
  intermediate_size: 1536,
  vocab_size: 30522,
  max_position_embeddings: 512,
};
const DISTILBERT_CONFIG = {
  model_type: 'distilbert',
  dim: 768,
  n_heads: 12,
  n_layers: 6,
  hidden_dim: 3072,
  vocab_size: 30522,
  max_position_embeddings: 512,
};
const MINILM = modelShape(MINILM_CONFIG)!;

/** A budget input for MiniLM at the CPU defaults. */
const minilm = (budgetMiB: number, restingMiB = 230) => ({
  budgetBytes: budgetMiB * MiB,
  restingBytes: restingMiB * MiB,
  shape: MINILM,
  maxSize: 32,
  maxPaddedTokens: 16384,
  maxLength: 512,
  positions: 512,
});

describe('the memory a model call takes', () => {
  it('reads the sizes from BERT and DistilBERT configs, and nothing from a config that does not say', () => {
    assert.deepEqual(MINILM, { hidden: 384, heads: 12, layers: 6, intermediate: 1536, vocab: 30522, positions: 512 });
    assert.deepEqual(modelShape(DISTILBERT_CONFIG), {
      hidden: 768,
      heads: 12,
      layers: 6,
      intermediate: 3072,
      vocab: 30522,
      positions: 512,
    });
    assert.equal(modelShape({ model_type: 'mystery', hidden_size: 64 }), undefined);
  });

  it('counts the parameters the replicas hold, within 1%', () => {
    // replica/provenance.json: 22,713,986 and 66,955,010 (heads included, which the count leaves out).
    for (const [shape, params] of [
      [MINILM, 22_713_986],
      [modelShape(DISTILBERT_CONFIG)!, 66_955_010],
    ] as Array<[ModelShape, number]>) {
      assert.ok(Math.abs(parameterCount(shape) / params - 1) < 0.01, `${parameterCount(shape)} against ${params}`);
    }
    // q8: a byte a weight, held twice, beside the runtime.
    assert.equal(restingBytes(MINILM, 'q8'), RUNTIME_BYTES + 2 * parameterCount(MINILM));
    assert.equal(restingBytes(MINILM, 'fp32'), RUNTIME_BYTES + 8 * parameterCount(MINILM));
  });

  it('grows linearly with rows and, at length, with its square (attention)', () => {
    assert.equal(callBytes(MINILM, 32, 128), 32 * callBytes(MINILM, 1, 128));
    assert.equal(
      heldBytes(MINILM, 8, 512),
      1.3 * callBytes(MINILM, 8, 512),
      'what the arena comes to hold among calls of other sizes',
    );
    const growth = callBytes(MINILM, 1, 512) / callBytes(MINILM, 1, 256);
    assert.ok(growth > 3.5 && growth < 4, `doubling the length multiplies it by ${growth}`);
    // The CPU defaults' largest call, 32 rows of 512 tokens: about 2 GiB (docs/memory.md).
    const largest = callBytes(MINILM, 32, 512) / MiB;
    assert.ok(largest > 1900 && largest < 2200, `${largest} MiB`);
  });
});

describe('the limits a memory budget sets', () => {
  it('keeps every call the planner may make within the budget, and takes all that fits', () => {
    for (const budget of [500, 700, 1024, 1536]) {
      const input = minilm(budget);
      const limits = limitsWithin(input);
      assert.equal(limits.callBudgetBytes, input.budgetBytes - input.restingBytes - HEADROOM_BYTES);
      for (let length = 1; length <= limits.longest; length++) {
        const rows = limits.maxRows(length);
        assert.ok(
          heldBytes(MINILM, rows, length) <= limits.callBudgetBytes,
          `${budget} MiB: ${rows} rows of ${length}`,
        );
        const capped = rows === input.maxSize || (rows + 1) * length > input.maxPaddedTokens;
        assert.ok(
          capped || heldBytes(MINILM, rows + 1, length) > limits.callBudgetBytes,
          `${budget} MiB: one more row of ${length} would fit`,
        );
        assert.ok(rows * length <= limits.maxPaddedTokens && rows <= limits.maxSize);
      }
      assert.ok(limits.longest === 512 || heldBytes(MINILM, 1, limits.longest + 1) > limits.callBudgetBytes);
    }
  });

  it('lowers BATCH_MAX_TOKENS and the rows of long calls at 1 GiB, and leaves short calls as they were', () => {
    const limits = limitsWithin(minilm(1024));
    assert.equal(limits.longest, 512);
    // 730 MiB for the arena: 8 rows of 512 tokens (63 MiB each, 82 held), 13 of 400, 32 of 128.
    assert.equal(limits.maxRows(512), 8);
    assert.equal(limits.maxRows(400), 13);
    assert.equal(limits.maxRows(128), 32);
    assert.equal(limits.maxSize, 32);
    assert.ok(limits.maxPaddedTokens < 16384 && limits.maxPaddedTokens >= 32 * 128, `${limits.maxPaddedTokens}`);
  });

  it('leaves the settings as they are where the budget holds their largest call', () => {
    const limits = limitsWithin(minilm(4096));
    assert.deepEqual(
      [limits.maxSize, limits.maxPaddedTokens, limits.longest, limits.maxRows(512), limits.maxRows(16)],
      [32, 16384, 512, 32, 32],
    );
  });

  it('keeps a BATCH_MAX_TOKENS below the model length as it is: a longer input runs alone', () => {
    const limits = limitsWithin({ ...minilm(1024), maxPaddedTokens: 100 });
    assert.deepEqual(
      [limits.maxPaddedTokens, limits.longest, limits.maxRows(300), limits.maxRows(50)],
      [100, 512, 1, 2],
    );
  });

  it("without a stated position table, takes inputs as long as fit alone, past the tokenizer's limit", () => {
    const limits = limitsWithin({ ...minilm(1024), positions: undefined });
    assert.ok(limits.longest > 512, `${limits.longest}`);
    assert.ok(
      heldBytes(MINILM, 1, limits.longest) <= limits.callBudgetBytes &&
        heldBytes(MINILM, 1, limits.longest + 1) > limits.callBudgetBytes,
    );
  });

  it('takes inputs only as long as fit alone under a small budget, and refuses a budget the model fills at rest', () => {
    const small = limitsWithin(minilm(310));
    assert.ok(small.longest < 512 && small.longest > 100, `${small.longest}`);
    assert.ok(
      heldBytes(MINILM, 1, small.longest) <= small.callBudgetBytes &&
        heldBytes(MINILM, 1, small.longest + 1) > small.callBudgetBytes,
    );
    assert.equal(small.maxRows(small.longest), 1);
    assert.throws(
      () => limitsWithin(minilm(280)),
      (err: Error) =>
        err instanceof MemoryBudgetError &&
        /WORKER_MEMORY_MB=280 leaves no room .* about 230 MiB at rest.* give it at least 380/.test(err.message),
    );
  });

  it('the planner keeps to the rows each length may have', () => {
    const limits = limitsWithin(minilm(700));
    const seq = (n: number) => ({ owner: n, encoded: { text: '', ids: Array<number>(n).fill(0) } });
    const lengths = [...Array<number>(40).fill(400), ...Array<number>(40).fill(500), ...Array<number>(40).fill(30)];
    const calls = planCalls(lengths.map(seq), limits);
    assert.equal(calls.flat().length, lengths.length, 'every sequence planned once');
    for (const call of calls) {
      const longest = Math.max(...call.map((s) => s.owner));
      assert.ok(call.length <= limits.maxRows(longest), `${call.length} rows of ${longest}`);
      assert.ok(heldBytes(MINILM, call.length, longest) <= limits.callBudgetBytes);
    }
  });
});
