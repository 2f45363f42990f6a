export * from './names.js';
export * from './connection.js';
export * from './redis-check.js';
export * from './workers.js';
export * from './model-loads.js';
export * from './depths.js';
export { EVENTS_KEPT, FAILED_KEPT_MS, JOB_OPTIONS, QUEUE_STREAMS, outcomesKeptMs } from './job-options.js';
export * from './redis-cause.js';
