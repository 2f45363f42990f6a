import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ApiError, type QueuedRequest, type RequestOutcome } from '@tserve/contract';
import { ModelBatchRunner, planCalls } from '../../apps/worker/src/pipeline/runner.ts';
import type { Encoded, Engine } from '../../apps/worker/src/model/engine.ts';
import type { TaskHead } from '../../apps/worker/src/tasks/index.ts';

/**
 * The runner with a stand-in engine: one "token" per word, a forward pass that fails on any batch
 * holding the word "poison", and a clock that advances by 10 ms per model call. The default head
 * answers a sequence with its text and row.
 */
function harness(
  options: {
    abandoned?: string[];
    head?: TaskHead;
    maxSize?: number;
    onEncode?: (text: string) => void;
    maxAnswerValues?: number;
    longest?: number;
  } = {},
) {
  let now = 1_000_000;
  const calls: string[][] = [];
  const engine = {
    loaded: { maxLength: 512, positions: 512 },
    encode: (text: string): Encoded => {
      options.onEncode?.(text);
      return { text, ids: text.split(' ').map((_, i) => i) };
    },
    forward: async (batch: Encoded[]) => {
      calls.push(batch.map((e) => e.text));
      now += 10;
      if (batch.some((e) => e.text.includes('poison'))) throw new Error('ORT failed: bad input\n    at native frames');
      return { data: new Float32Array(batch.length), dims: [batch.length, 1] };
    },
  } as unknown as Engine;
  const head: TaskHead = options.head ?? { decode: (_output, row, encoded) => `${encoded.text}#${row}` };
  const finished = new Map<string, RequestOutcome>();
  const runner = new ModelBatchRunner({
    engine,
    heads: () => head,
    limits: { maxSize: options.maxSize ?? 4, maxPaddedTokens: 1000, longest: options.longest },
    outcomes: {
      accept: (request, outcome) => {
        assert.ok(!finished.has(request.id), `${request.id} finished twice`);
        finished.set(request.id, outcome);
      },
    },
    abandoned: new Set(options.abandoned),
    now: () => now,
    maxAnswerValues: options.maxAnswerValues,
  });
  const request = (id: string, inputs: string[], deadlineIn = 1000): QueuedRequest => ({
    id,
    inputs,
    parameters: {},
    deadline: now + deadlineIn,
    enqueuedAt: now,
  });
  return { runner, finished, calls, request, advance: (ms: number) => (now += ms) };
}

/** The error type of a failed outcome; undefined for a success. */
const errorType = (outcome: RequestOutcome | undefined) =>
  outcome && !outcome.ok ? outcome.error.error_type : undefined;

describe('planCalls', () => {
  const seq = (n: number) => ({ owner: n, encoded: { text: '', ids: Array(n).fill(0) } });

  it('sorts by length and closes a call at the size cap, the token cap, or half padding', () => {
    const plan = (lengths: number[], maxSize: number, maxPaddedTokens: number) =>
      planCalls(lengths.map(seq), { maxSize, maxPaddedTokens }).map((c) => c.map((s) => s.owner));
    assert.deepEqual(plan([5, 1, 3, 2], 2, 1000), [
      [1, 2],
      [3, 5],
    ]);
    assert.deepEqual(plan([4, 4, 4, 4], 8, 8), [
      [4, 4],
      [4, 4],
    ]);
    // Ten short ones and a long one: the long one goes alone rather than pad the rest.
    assert.deepEqual(plan([...Array(10).fill(2), 40], 32, 10_000), [Array(10).fill(2), [40]]);
  });

  it('gives a sequence longer than the padded-token cap a call of its own, and plans every sequence once', () => {
    const plan = planCalls([3, 50, 3, 3].map(seq), { maxSize: 8, maxPaddedTokens: 10 }).map((c) =>
      c.map((s) => s.owner),
    );
    assert.deepEqual(plan, [[3, 3, 3], [50]]);
  });
});

describe('ModelBatchRunner', () => {
  it('answers every input of a request once, in order, after its last call', async () => {
    const { runner, finished, request } = harness();
    await runner.run([request('a', ['one', 'two words', 'three little words']), request('b', ['alone'])]);
    const a = finished.get('a')!;
    assert.ok(a.ok);
    assert.deepEqual(
      a.outputs.map((o) => String(o).split('#')[0]),
      ['one', 'two words', 'three little words'],
    );
    assert.ok(finished.get('b')!.ok);
  });

  it('isolates the input that breaks the model by halving; its request alone fails', async () => {
    const { runner, finished, calls, request } = harness();
    await runner.run(['x1', 'x2', 'poison pill', 'x3'].map((t, i) => request(`r${i}`, [t])));
    const failed = [...finished.entries()].filter(([, o]) => !o.ok).map(([id]) => id);
    assert.deepEqual(failed, ['r2']);
    const outcome = finished.get('r2')!;
    assert.ok(!outcome.ok && outcome.error.error_type === 'inference');
    assert.ok(!outcome.ok && !/at native/.test(outcome.error.error), 'only the first line of the engine error');
    assert.ok(calls.length > 1 && calls.some((c) => c.length === 1 && c[0] === 'poison pill'));
  });

  it('names the failing input of a multi-input request', async () => {
    const { runner, finished, request } = harness();
    await runner.run([request('m', ['fine', 'poison'])]);
    const outcome = finished.get('m')!;
    assert.ok(!outcome.ok && /^inputs\[1\]: /.test(outcome.error.error), JSON.stringify(outcome));
  });

  it('refuses unrun an input longer than the position table, where its call would fail; the rest of the batch runs without halving', async () => {
    const { runner, finished, calls, request } = harness({ maxSize: 8 });
    const long = Array(600).fill('w').join(' ');
    await runner.run([
      request('a', ['x1']),
      request('long', [long]),
      request('mixed', ['x2', long, 'x3']),
      request('b', ['x4']),
    ]);
    const refused = (id: string) => {
      const outcome = finished.get(id)!;
      return !outcome.ok && outcome.error.error_type === 'validation' ? outcome.error.error : undefined;
    };
    assert.equal(
      refused('long'),
      'input is 600 tokens long but this model accepts at most 512; shorten it or leave "truncation" on',
    );
    assert.match(refused('mixed') ?? '', /^inputs\[1\]: input is 600 tokens long/);
    assert.ok(finished.get('a')!.ok && finished.get('b')!.ok);
    assert.deepEqual(calls, [['x1', 'x4']], "one call, without the refused requests' inputs");
  });

  it('refuses unrun, 413, an input whose call would not fit the memory budget even alone; the rest of the batch runs', async () => {
    const { runner, finished, calls, request } = harness({ maxSize: 8, longest: 100 });
    const long = Array(101).fill('w').join(' ');
    await runner.run([
      request('a', ['x1']),
      request('long', [long]),
      request('mixed', ['x2', long]),
      request('fits', [Array(100).fill('w').join(' ')]),
    ]);
    const refused = (id: string) => {
      const outcome = finished.get(id)!;
      return !outcome.ok && outcome.error.error_type === 'payload_too_large' ? outcome.error.error : undefined;
    };
    assert.equal(
      refused('long'),
      "input is 101 tokens long, but this worker's memory budget (WORKER_MEMORY_MB) holds model calls of at most 100 tokens per input; send a shorter input",
    );
    assert.match(refused('mixed') ?? '', /^inputs\[1\]: input is 101 tokens long/);
    assert.ok(finished.get('a')!.ok && finished.get('fits')!.ok);
    assert.deepEqual(calls.flat().length, 2, "the refused requests' inputs never ran");
  });

  it('drops expired and abandoned requests unrun, and re-checks deadlines between calls', async () => {
    const { runner, finished, calls, request, advance } = harness({ abandoned: ['gone'] });
    const late = request('late', ['too late'], -1);
    const gone = request('gone', ['nobody reads this']);
    // Short inputs first; the long one comes in a later call, after the clock moved 10 ms.
    const tight = request('tight', ['a b c d e f g h i j k l m n o p q r s t u v w x y z'], 15);
    const tighter = request('tighter', ['a b c d e f g h i j k l m n o p q r s t u v w x y z and more'], 5);
    const shorts = ['s1', 's2', 's3', 's4'].map((id) => request(id, ['short']));
    const report = await runner.run([late, gone, ...shorts, tight, tighter]);
    advance(0);
    assert.equal(errorType(finished.get('tighter')), 'timeout', 'expired during the first call');
    assert.ok(!calls.flat().some((t) => t.endsWith('and more')));
    assert.equal(errorType(finished.get('late')), 'timeout');
    assert.equal(errorType(finished.get('gone')), 'cancelled');
    assert.ok(!calls.flat().includes('too late') && !calls.flat().includes('nobody reads this'));
    assert.equal(report.expired, 2);
    assert.equal(report.abandoned, 1);
    assert.ok(finished.get('tight')!.ok, 'still on time after the first call');
  });

  it('isolates each of several culprits in one call; every other input is answered', async () => {
    const { runner, finished, calls, request } = harness({ maxSize: 8 });
    const texts = ['a1', 'poison1', 'a2', 'a3', 'a4', 'a5', 'poison2', 'a6'];
    await runner.run(texts.map((t, i) => request(`r${i}`, [t])));
    assert.deepEqual(
      texts.map((_, i) => errorType(finished.get(`r${i}`)) ?? 'ok'),
      ['ok', 'inference', 'ok', 'ok', 'ok', 'ok', 'inference', 'ok'],
    );
    // Halving: the call of 8 splits into 4 + 4, each into 2 + 2, and a failing pair into 1 + 1.
    assert.deepEqual(
      calls.map((c) => c.length),
      [8, 4, 2, 1, 1, 2, 4, 2, 2, 1, 1],
    );
  });

  it("combines an input's several sequences in order, across model calls", async () => {
    // Each input runs as one sequence per word; the answer joins the rows' words back.
    const head: TaskHead = {
      encode: (input) => (input as string).split(' ').map((word) => ({ text: word, ids: Array(word.length).fill(0) })),
      decode: (_output, _row, encoded) => encoded.text,
      combine: (parts) => parts.join(' '),
    };
    const { runner, finished, calls, request } = harness({ head, maxSize: 2 });
    await runner.run([request('m', ['aaaa b cc', 'ddd e']), request('n', ['ff'])]);
    assert.ok(calls.length >= 3, 'the sequences span several calls');
    const m = finished.get('m')!;
    assert.ok(m.ok);
    assert.deepEqual(m.outputs, ['aaaa b cc', 'ddd e']);
    assert.deepEqual(m.tokens, [7, 4]);
    assert.equal(m.timing.batch_size, 2);
  });

  it('fails a request once when one of its sequences fails, naming the input', async () => {
    const head: TaskHead = {
      encode: (input) => (input as string).split(' ').map((word) => ({ text: word, ids: [0] })),
      decode: (_output, _row, encoded) => encoded.text,
      combine: (parts) => parts.join(' '),
    };
    const { runner, finished, request } = harness({ head });
    await runner.run([request('m', ['fine words', 'then poison here'])]);
    const m = finished.get('m')!;
    assert.ok(
      !m.ok && m.error.error.startsWith('inputs[1]: ') && m.error.error_type === 'inference',
      JSON.stringify(m),
    );
  });

  it('fails only the unanswered requests of a batch that broke outside its isolation', async () => {
    const { runner, finished, request } = harness();
    const batch = await runner.prepare([request('done', ['x']), request('left', ['y'])]);
    await runner.execute({ ...batch, sequences: batch.sequences.slice(0, 1) });
    runner.failUnanswered(batch, new ApiError('internal', 'broke'));
    assert.ok(finished.get('done')!.ok);
    assert.equal(errorType(finished.get('left')), 'internal');
  });

  for (const path of ['encoded for the model', 'answered without it (tokenize)'] as const) {
    it(`lets the event loop run between inputs while a long batch is tokenized: inputs ${path}`, async () => {
      // Each input takes 60 ms to tokenize, past the 50 ms slice: timers (the heartbeat, lock
      // renewals) must get their turn before the batch is done, not after.
      let turns = 0;
      const seenAt: number[] = [];
      const slowly = () => {
        seenAt.push(turns);
        const until = performance.now() + 60;
        while (performance.now() < until);
      };
      const { runner, request } =
        path === 'encoded for the model'
          ? harness({ onEncode: slowly })
          : harness({ head: { answer: slowly } as unknown as TaskHead });
      const ticker = setInterval(() => turns++, 0);
      try {
        await runner.prepare([request('a', ['one', 'two', 'three']), request('b', ['four'])]);
      } finally {
        clearInterval(ticker);
      }
      assert.equal(seenAt.length, 4);
      assert.ok(
        seenAt.every((n, i) => i === 0 || n > seenAt[i - 1]),
        `a turn of the loop between each input and the next: timers ran ${seenAt.join(', ')} times before each`,
      );
    });
  }

  it('post-processes a call row by row with the event loop running between, and drops a request whose time ran out meanwhile', async () => {
    // Each row takes 60 ms of post-processing (fill-mask with hundreds of candidates) and 600 ms of the runner's clock.
    let turns = 0;
    const seenAt: number[] = [];
    let advanceClock = (_ms: number) => {};
    const head = {
      decode: (_output: unknown, _row: number, encoded: Encoded) => {
        seenAt.push(turns);
        const until = performance.now() + 60;
        while (performance.now() < until);
        advanceClock(600);
        return encoded.text;
      },
    } as unknown as TaskHead;
    const { runner, finished, request, advance } = harness({ head });
    advanceClock = advance;
    const ticker = setInterval(() => turns++, 0);
    let report;
    try {
      report = await runner.run(['one', 'two', 'three'].map((t) => request(t, [t])));
    } finally {
      clearInterval(ticker);
    }
    assert.ok(seenAt[1] > seenAt[0], `timers ran ${seenAt.join(', ')} times before each row`);
    assert.ok(finished.get('one')!.ok && finished.get('two')!.ok);
    assert.equal(errorType(finished.get('three')), 'timeout');
    assert.equal(seenAt.length, 2, 'the expired row was not post-processed');
    assert.equal(report.expired, 1);
  });

  it('refuses unrun a request whose answer would hold more than MAX_ANSWER_VALUES numbers, counted over all its inputs', async () => {
    // Ten numbers per token, as token embeddings of width ten.
    const head = {
      answerValues: (encoded: Encoded) => encoded.ids.length * 10,
      decode: (_o: unknown, _r: number, e: Encoded) => e.text,
    } as unknown as TaskHead;
    const { runner, finished, calls, request } = harness({ head, maxAnswerValues: 100 });
    await runner.run([request('fits', ['a b c d e f g h i j']), request('over', ['a b c d e f', 'g h i j k'])]);
    assert.ok(finished.get('fits')!.ok);
    const over = finished.get('over')!;
    assert.ok(
      !over.ok &&
        over.error.error_type === 'payload_too_large' &&
        /110 numbers; at most 100 .*MAX_ANSWER_VALUES/.test(over.error.error),
      JSON.stringify(over),
    );
    assert.deepEqual(calls.flat(), ['a b c d e f g h i j']);
  });

  it('with pacing, holds each call to the rows it allows and runs what goes ahead between calls, not before the first', async () => {
    const { runner, finished, calls, request } = harness({ maxSize: 4 });
    const log: string[] = [];
    const rows = [3, 1, 2];
    const report = await runner.execute(
      await runner.prepare(['a', 'b', 'c', 'd', 'e', 'f'].map((t) => request(t, [t]))),
      {
        rows: () => rows.shift(),
        between: async () => {
          log.push(`between after ${calls.length} calls`);
        },
        ran: (n) => log.push(`ran ${n}`),
      },
    );
    // Planned as calls of 4 and 2 rows (BATCH_MAX_SIZE 4); the pacing cut the first into 3 and 1.
    assert.deepEqual(calls, [['a', 'b', 'c'], ['d'], ['e', 'f']]);
    assert.deepEqual(report.callSizes, [3, 1, 2]);
    assert.deepEqual(log, ['ran 3', 'between after 1 calls', 'ran 1', 'between after 2 calls', 'ran 2']);
    assert.equal([...finished.values()].filter((o) => o.ok).length, 6);
  });
});
