/**
 * Issue 45: the rest of Triton's HTTP API that its tools read. A model's configuration and its
 * statistics in Triton's JSON forms, from what the workers announce and measure, and Triton's
 * classification extension (tritonclient's class_count). docs/clients.md runs Triton's own client
 * against the same routes (test/client-snippets.test.ts).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TestSystem, uniquePrefix, waitFor } from './helpers/system.ts';
import { CLASSIFIER, EMBEDDER } from './helpers/replicas.ts';
import { binaryRequest, bytesTensor } from './helpers/triton.ts';

interface Duration {
  count: number;
  ns: number;
}
interface ModelStats {
  name: string;
  version: string;
  last_inference: number;
  inference_count: number;
  execution_count: number;
  inference_stats: Record<
    'success' | 'fail' | 'queue' | 'compute_input' | 'compute_infer' | 'compute_output' | 'cache_hit' | 'cache_miss',
    Duration
  >;
  batch_stats: Array<{
    batch_size: number;
    compute_input: Duration;
    compute_infer: Duration;
    compute_output: Duration;
  }>;
}

const enc = encodeURIComponent;

describe("Triton's model configuration, statistics and classification", () => {
  const system = new TestSystem(uniquePrefix('triton'));
  const get = async (path: string) => {
    const res = await fetch(`${system.url}${path}`);
    return { status: res.status, body: (await res.json()) as any };
  };
  const stats = async (model: string) =>
    ((await get(`/v2/models/${enc(model)}/stats`)).body.model_stats as ModelStats[])[0];

  before(async () => {
    await system.startGateway();
    system.startWorker({ model: CLASSIFIER, env: { BATCH_MAX_SIZE: 16, BATCH_MAX_WAIT_MS: 7 } });
    system.startWorker({ model: EMBEDDER });
    await system.waitForWorkers(CLASSIFIER);
    await system.waitForWorkers(EMBEDDER);
  });
  after(() => system.stop());

  it("config: inputs, outputs, max_batch_size and dynamic batching from the workers' settings, with or without a version", async () => {
    const { status, body } = await get(`/v2/models/${enc(CLASSIFIER)}/config`);
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(body.name, CLASSIFIER);
    assert.equal(body.platform, 'onnxruntime_onnx');
    assert.equal(body.max_batch_size, 16);
    assert.deepEqual(
      body.input.map((i: { name: string; data_type: string; dims: number[] }) => [i.name, i.data_type, i.dims]),
      [['text', 'TYPE_STRING', [1]]],
    );
    assert.deepEqual(
      body.output.map((o: { name: string; data_type: string; dims: number[] }) => [o.name, o.data_type, o.dims]),
      [
        ['probabilities', 'TYPE_FP32', [2]],
        ['logits', 'TYPE_FP32', [2]],
      ],
    );
    assert.equal(body.dynamic_batching.max_queue_delay_microseconds, 7000);
    assert.deepEqual(body.dynamic_batching.preferred_batch_size, [16]);
    assert.deepEqual([body.instance_group[0].kind, body.instance_group[0].count], ['KIND_CPU', 1]);

    assert.deepEqual(
      (await get(`/v2/models/${CLASSIFIER}/versions/1/config`)).body,
      body,
      'the name may go unescaped, with a version',
    );
    const embedder = (await get(`/v2/models/${enc(EMBEDDER)}/config`)).body;
    assert.deepEqual(embedder.output[0].name, 'embeddings');
    assert.equal((await get(`/v2/models/${enc(CLASSIFIER)}/versions/2/config`)).status, 404);
    const missing = await get(`/v2/models/replica%2Fnone/config`);
    assert.equal(missing.status, 404);
    assert.match(missing.body.error, /not served/);
  });

  it('stats: counts and durations of requests, model calls and batch sizes, as the workers measured them', async () => {
    const before = await stats(CLASSIFIER);
    assert.equal(before.name, CLASSIFIER);
    assert.equal(before.version, '1');
    const texts = ['I love this', 'I hate this', 'a much longer text about what I think of this place'];
    const answers = await Promise.all(
      texts.map((text) =>
        system.post(`/v2/models/${enc(CLASSIFIER)}/infer`, {
          inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: [text] }],
        }),
      ),
    );
    for (const a of answers) assert.equal(a.status, 200, JSON.stringify(a.body));
    const both = await system.infer(CLASSIFIER, ['one', 'two']);
    assert.equal(both.status, 200);
    const refused = await system.infer(CLASSIFIER, 'word '.repeat(600), { truncation: false });
    assert.equal(refused.status, 400);

    // Workers announce their counts with each heartbeat.
    const after = await waitFor(
      'the counts of those requests in the stats',
      async () => {
        const s = await stats(CLASSIFIER);
        return s.inference_count >= before.inference_count + 5 &&
          s.inference_stats.fail.count >= before.inference_stats.fail.count + 1
          ? s
          : undefined;
      },
      10_000,
    );
    const grew = (key: keyof ModelStats['inference_stats']) =>
      after.inference_stats[key].count - before.inference_stats[key].count;
    assert.equal(grew('success'), 4, 'four requests answered');
    assert.equal(after.inference_count - before.inference_count, 5, 'five texts');
    assert.equal(grew('fail'), 1);
    for (const key of ['queue', 'compute_input', 'compute_infer', 'compute_output'] as const) {
      assert.equal(grew(key), 4, key);
      assert.ok(after.inference_stats[key].ns > before.inference_stats[key].ns, `${key} took time`);
    }
    assert.ok(
      after.inference_stats.success.ns >= after.inference_stats.compute_infer.ns,
      'a request lasts at least its model calls',
    );
    assert.ok(after.execution_count > before.execution_count && after.execution_count - before.execution_count <= 5);
    assert.ok(after.last_inference >= Date.now() - 60_000);
    const calls = after.batch_stats.reduce((n, b) => n + b.compute_infer.count, 0);
    assert.equal(calls, after.execution_count, 'every model call is counted under its batch size');
    assert.ok(after.batch_stats.every((b) => b.batch_size >= 1 && b.compute_infer.ns > 0));

    const all = (await get('/v2/models/stats')).body.model_stats as ModelStats[];
    assert.deepEqual(all.map((s) => s.name).sort(), [CLASSIFIER, EMBEDDER].sort());
    assert.equal((await get(`/v2/models/${enc(CLASSIFIER)}/versions/1/stats`)).status, 200);
  });

  it('class_count: the top classes as "value:index:label", in JSON and in binary, and a 400 where it cannot apply', async () => {
    const texts = ['I love this', 'I hate this'];
    const { body } = await system.post(`/v2/models/${enc(CLASSIFIER)}/infer`, {
      inputs: [{ name: 'text', shape: [2], datatype: 'BYTES', data: texts }],
      outputs: [{ name: 'probabilities', parameters: { classification: 1 } }, { name: 'logits' }],
    });
    const [top, logits] = body.outputs;
    assert.deepEqual([top.datatype, top.shape], ['BYTES', [2, 1]]);
    const labels = (await get(`/v2/models/${enc(CLASSIFIER)}`)).body.parameters.labels as string[];
    top.data.forEach((entry: string, row: number) => {
      const [value, index, label] = entry.split(':');
      const rowLogits = logits.data.slice(row * 2, row * 2 + 2) as number[];
      assert.equal(
        Number(index),
        rowLogits.indexOf(Math.max(...rowLogits)),
        'the largest probability is the largest logit',
      );
      assert.equal(label, labels[Number(index)]);
      assert.ok(Number(value) > 0.5 && Number(value) <= 1);
    });

    // As tritonclient asks: binary input, and the classes as a binary BYTES tensor.
    const [request, headerLength] = binaryRequest(
      {
        inputs: [
          {
            name: 'text',
            shape: [2, 1],
            datatype: 'BYTES',
            parameters: { binary_data_size: bytesTensor(texts).length },
          },
        ],
        outputs: [{ name: 'probabilities', parameters: { classification: 2, binary_data: true } }],
      },
      bytesTensor(texts),
    );
    const res = await fetch(`${system.url}/v2/models/${enc(CLASSIFIER)}/infer`, {
      method: 'POST',
      headers: { 'inference-header-content-length': headerLength },
      body: request,
    });
    assert.equal(res.status, 200);
    const raw = Buffer.from(await res.arrayBuffer());
    const jsonLength = Number(res.headers.get('inference-header-content-length'));
    const header = JSON.parse(raw.subarray(0, jsonLength).toString());
    assert.deepEqual([header.outputs[0].datatype, header.outputs[0].shape], ['BYTES', [2, 2]]);
    const elements: string[] = [];
    for (let at = jsonLength; at < raw.length;) {
      const length = raw.readUInt32LE(at);
      elements.push(raw.subarray(at + 4, at + 4 + length).toString());
      at += 4 + length;
    }
    assert.equal(elements.length, 4);
    for (const row of [0, 1]) {
      const [first, second] = elements.slice(row * 2, row * 2 + 2).map((e) => Number(e.split(':')[0]));
      assert.ok(first >= second, 'largest first');
      assert.ok(Math.abs(first + second - 1) < 1e-5, 'both classes of a two-label model');
    }

    const embedding = await system.post(`/v2/models/${enc(EMBEDDER)}/infer`, {
      inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['x'] }],
      outputs: [{ name: 'embeddings', parameters: { classification: 3 } }],
    });
    assert.equal(embedding.status, 400);
    assert.match(embedding.body.error, /classification applies to a classifier/);
    const zero = await system.post(`/v2/models/${enc(CLASSIFIER)}/infer`, {
      inputs: [{ name: 'text', shape: [1], datatype: 'BYTES', data: ['x'] }],
      outputs: [{ name: 'probabilities', parameters: { classification: 0 } }],
    });
    assert.equal(zero.status, 400);
    assert.match(zero.body.error, /positive integer/);
  });
});
