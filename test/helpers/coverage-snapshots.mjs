/**
 * A process preload (`node --import ./test/helpers/coverage-snapshots.mjs`, with NODE_V8_COVERAGE
 * set) that writes the process's coverage when told: on SIGUSR2 every thread of the process (the
 * worker's model thread too) writes what ran since its last snapshot (v8.takeCoverage, which then
 * starts the counts over), and once all have, the main thread prints `coverage snapshot <n>` on
 * stderr. So a test takes a snapshot, sends one request, takes another, and the second holds what
 * that request ran and nothing of the start (test/helpers/trip-coverage.ts reads them).
 */
import v8 from 'node:v8';
import { isMainThread, threadId } from 'node:worker_threads';

const channel = new BroadcastChannel('tserve-coverage-snapshots');

if (isMainThread) {
  /** The other threads that load this preload: each writes its own file on each snapshot. */
  const threads = new Set();
  let taken = 0;
  /** The threads yet to write the snapshot in progress. */
  let waiting = new Set();
  const done = () => process.stderr.write(`coverage snapshot ${taken}\n`);
  channel.onmessage = ({ data }) => {
    if (data.hello !== undefined) threads.add(data.hello);
    if (data.bye !== undefined) threads.delete(data.bye);
    if (data.wrote === taken && waiting.delete(data.thread) && waiting.size === 0) done();
  };
  process.on('SIGUSR2', () => {
    taken++;
    v8.takeCoverage();
    waiting = new Set(threads);
    if (waiting.size === 0) done();
    else channel.postMessage({ take: taken });
  });
} else {
  channel.postMessage({ hello: threadId });
  process.on('exit', () => channel.postMessage({ bye: threadId }));
  channel.onmessage = ({ data }) => {
    if (data.take === undefined) return;
    v8.takeCoverage();
    channel.postMessage({ wrote: data.take, thread: threadId });
  };
}
// Set after its listener: the channel never keeps a thread, or the process, alive.
channel.unref();
