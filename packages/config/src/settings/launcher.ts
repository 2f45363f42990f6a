import { z } from 'zod';
import { ADVANCED, int, setting } from '../setting.js';

/** `npm start`'s own settings: which models, how many workers each, and the Redis it starts if none answers. */

export const launcherShape = {
  MODEL: setting(
    z.string().default('replica/MiniLM-L6-H384-uncased-sst2'),
    'model ids, comma-separated; a worker pool per model, the first serves POST /',
  ),
  WORKERS: int(1, 0, 'worker processes per model'),
  REDIS_SERVER_BIN: setting(z.string().default('redis-server'), 'started when nothing answers at REDIS_URL').meta(
    ADVANCED,
  ),
};
