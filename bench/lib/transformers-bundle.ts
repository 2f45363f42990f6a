/**
 * transformers.js as a module of its own in the release archive (`bench-transformers.js`), for the
 * path floor's stand-in thread, which imports it by address (path-floor.ts).
 */
export { env, pipeline } from '@huggingface/transformers';
