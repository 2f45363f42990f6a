import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import type { QueuedRequest } from '@tserve/contract';
import { Consumer } from '../../apps/worker/src/pipeline/consumer.ts';
import type { Job, TakenJobs } from '../../apps/worker/src/pipeline/jobs.ts';
import type { CallPacing } from '../../apps/worker/src/pipeline/precedence.ts';
import type { PreparedBatch } from '../../apps/worker/src/pipeline/prepared-batch.ts';
import type { ModelBatchRunner } from '../../apps/worker/src/pipeline/runner.ts';

/** A job of one request named `id`. */
function work(id: string, bulk: boolean): Job {
  const request = { id, inputs: ['x'], parameters: {}, deadline: Date.now() + 60_000, enqueuedAt: Date.now() };
  return { id, requests: [request], bulk };
}

/** Jobs the test hands over one by one, as a queue's would come. */
function intake() {
  const queue: Job[] = [];
  let arrived: (() => void) | undefined;
  let took: (() => void) | undefined;
  const source: TakenJobs = {
    start: () => undefined,
    next: async () => {
      while (queue.length === 0) await new Promise<void>((resolve) => (arrived = resolve));
      const job = queue.shift();
      took?.();
      return job;
    },
    waiting: async () => queue.length,
    take: async (count) => queue.splice(0, count),
    interactiveWaiting: async () => 0,
    sendTaken: () => undefined,
    accept: () => undefined,
    close: async () => undefined,
  };
  return {
    source,
    add: (...jobs: Job[]) => {
      queue.push(...jobs);
      arrived?.();
    },
    /** Resolves once the consumer has taken every job handed over. */
    taken: async () => {
      while (queue.length > 0) await new Promise<void>((resolve) => (took = resolve));
    },
  };
}

/**
 * A runner that logs what it runs: a bulk batch as three model calls (what goes ahead runs
 * between them), and interactive batches at once, but for the one named `held`, until released.
 */
function runner(held: string) {
  const log: string[] = [];
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let logged: (() => void) | undefined;
  const note = (line: string) => {
    log.push(line);
    logged?.();
  };
  const nameOf = (batch: PreparedBatch) => (batch.report as unknown as { name: string }).name;
  const fake = {
    prepare: async (requests: QueuedRequest[]) =>
      ({ sequences: [], report: { name: requests.map((r) => r.id).join('+') } }) as unknown as PreparedBatch,
    execute: async (batch: PreparedBatch, pacing?: CallPacing) => {
      const name = nameOf(batch);
      if (name === held) {
        note(`${name} starts`);
        await released;
      }
      for (let call = 1; call <= (name.startsWith('batch') ? 3 : 1); call++) {
        if (call > 1) await pacing?.between();
        note(`${name} call ${call}`);
        await new Promise((resolve) => setImmediate(resolve));
      }
      return batch.report;
    },
    failUnanswered: () => undefined,
  };
  const until = async (line: string) => {
    while (!log.includes(line)) await new Promise<void>((resolve) => (logged = resolve));
  };
  return { runner: fake as unknown as ModelBatchRunner, log, release, until };
}

describe('Consumer', () => {
  it(
    'runs interactive work gathered while interactive work ahead of bulk work runs before any of its calls',
    { timeout: 30_000 },
    async () => {
      const jobs = intake();
      const model = runner('first');
      const consumer = new Consumer({
        jobs: jobs.source,
        runner: model.runner,
        limits: { maxSize: 32, maxWaitMs: 1000 },
        peers: { peers: 0 },
        logger: pino({ level: 'silent' }),
      });
      // One gathered batch: an interactive job, which runs first, and bulk work behind it.
      jobs.add(work('first', false), work('batch', true));
      consumer.start();
      await model.until('first starts');
      // An interactive job comes while the first one runs, with the bulk work still to run.
      jobs.add(work('second', false));
      // Once the consumer has taken it, what it does with it takes no more than this turn of the
      // event loop: it waits for the next job, or for the work in hand to finish.
      await jobs.taken();
      await new Promise((resolve) => setImmediate(resolve));
      model.release();
      await model.until('batch call 3');
      await model.until('second call 1');
      assert.deepEqual(model.log, [
        'first starts',
        'first call 1',
        'second call 1',
        'batch call 1',
        'batch call 2',
        'batch call 3',
      ]);
      // The intake's wait for a job ends with one more: the consumer stops after it.
      const stopped = consumer.stop();
      jobs.add(work('last', false));
      await stopped;
    },
  );
});
