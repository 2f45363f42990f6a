export * from './names.js';
export * from './connection.js';
export * from './workers.js';
export * from './model-loads.js';
export * from './depths.js';
export { DEFAULT_JOB_OPTIONS } from './job-options.js';
