/**
 * The model calls a worker makes under the varied load, replayed in a process of their own, for
 * comparing ONNX Runtime's session options (its CPU arena, its memory patterns) without the rest of
 * the system: the texts of `variedTexts` are tokenized, gathered BATCH_MAX_SIZE at a time, split into
 * calls by the worker's own planner, and run on a session made with the worker's options and the
 * variant's over them. Prints one JSON line: texts per second, the peak RSS (VmHWM) and the RSS at
 * the end. Run by `bench/memory.ts --session`; usage:
 *   node --import tsx bench/lib/replay.ts <model> <model dir> <session options JSON> <texts> <min words> <max words>
 */
import { AutoModel, AutoTokenizer, Tensor, env } from '@huggingface/transformers';
import { loadWorkerConfig } from '@tserve/config';
import { sessionOptions } from '../../apps/worker/src/model/model.ts';
import { planCalls } from '../../apps/worker/src/pipeline/runner.ts';
import { processMemory } from '../../test/helpers/processes.ts';
import { variedTexts } from '../../test/helpers/texts.ts';

const [model, modelDir, optionsJson, count, minWords, maxWords] = process.argv.slice(2);
const config = loadWorkerConfig({ ...process.env, MODEL: model });
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = modelDir;
const tokenizer = await AutoTokenizer.from_pretrained(model);
const session = await AutoModel.from_pretrained(model, {
  dtype: 'q8',
  device: 'cpu',
  session_options: { ...sessionOptions(config), ...(JSON.parse(optionsJson) as Record<string, unknown>) },
});

const texts = variedTexts(Number(count), Number(minWords), Number(maxWords));
// Cut as the worker cuts a long text: its first tokens, and the closing special token.
const maxLength = Math.min(512, (tokenizer as unknown as { model_max_length?: number }).model_max_length ?? 512);
const encoded = texts.map((text) => {
  const ids = tokenizer.encode(text);
  return { text, ids: ids.length > maxLength ? [...ids.slice(0, maxLength - 1), ids.at(-1)!] : ids };
});

async function call(batch: Array<{ ids: number[] }>): Promise<void> {
  const rows = batch.length;
  const width = Math.max(...batch.map((e) => e.ids.length));
  const ids = new BigInt64Array(rows * width);
  const mask = new BigInt64Array(rows * width);
  batch.forEach((e, r) => e.ids.forEach((id, i) => ((ids[r * width + i] = BigInt(id)), (mask[r * width + i] = 1n))));
  const dims = [rows, width];
  await session({
    input_ids: new Tensor('int64', ids, dims),
    attention_mask: new Tensor('int64', mask, dims),
    token_type_ids: new Tensor('int64', new BigInt64Array(rows * width), dims),
  });
}

await call([encoded[0]]);
const started = performance.now();
for (let i = 0; i < encoded.length; i += config.BATCH_MAX_SIZE) {
  const gathered = encoded.slice(i, i + config.BATCH_MAX_SIZE).map((e) => ({ owner: e, encoded: e }));
  for (const chunk of planCalls(gathered, {
    maxSize: config.BATCH_MAX_SIZE,
    maxPaddedTokens: config.BATCH_MAX_TOKENS,
  })) {
    await call(chunk.map((s) => s.encoded));
  }
}
const seconds = (performance.now() - started) / 1000;
const memory = processMemory(process.pid);
process.stdout.write(
  `${JSON.stringify({ textsPerSecond: texts.length / seconds, peakMiB: memory?.peak, endMiB: memory?.rss })}\n`,
);
