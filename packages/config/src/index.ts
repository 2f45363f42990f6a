/**
 * Every setting of every process, parsed from the environment in this one place.
 * Each process calls its loader once at start-up; a bad value stops it with a message
 * naming the variable, instead of surfacing later as a confusing runtime error.
 *
 * settings/ declares each setting once (with setting.ts's helpers), load.ts turns the environment
 * into each program's config, and help.ts describes the settings from their declarations.
 */

export { DEVICES, DTYPES } from './settings/worker.js';
export * from './load.js';
export * from './help.js';
