export * from './schemas.js';
export * from './errors.js';
export * from './wire.js';
export * from './ready.js';
export * from './score-functions.js';
export * from './recorded-outcome.js';
export * from './dtypes.js';
export * from './outputs.js';
