import v8 from 'node:v8';

/**
 * Turns off V8's allocation-site pretenuring in the gateway. Imported first by `main.ts`, so that
 * it is set before any other module allocates.
 *
 * When most objects from one allocation site survive a young-generation collection, V8 allocates
 * that site's later objects straight into the old generation. Under an overload soak, V8 did that
 * to objects the gateway makes for each request, which live for milliseconds. Each one then died
 * in the old generation. Until the next full collection, every young object it pointed to
 * (headers, listeners, Express's per-request state) was kept alive and promoted too. So each
 * young-generation collection kept several times more alive than without pretenuring, and paused
 * the event loop several times longer (bench/README.md, "Pretenuring"). Every answer, refusals
 * included, waits out those pauses. Whether V8 pretenures depends on load, so the flag is set
 * whatever the load. It is set here rather than on node's
 * command line so that every way of starting the gateway (npm start, Compose, Kubernetes, the
 * tests) has it; V8 reads it at each collection, and the soak's figures show it taking effect.
 */
v8.setFlagsFromString('--no-allocation-site-pretenuring');
