export * from './names.js';
export * from './connection.js';
export * from './registry.js';
export { DEFAULT_JOB_OPTIONS } from './job-options.js';
