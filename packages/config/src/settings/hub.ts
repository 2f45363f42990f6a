import { z } from 'zod';
import { ADVANCED, bool, optionalString, setting } from '../setting.js';

/**
 * Where a worker without MODEL_DIR gets its model: the hub or a mirror. The names are
 * huggingface_hub's (and TEI's), so that an operator's existing settings work unchanged.
 */
export const hubShape = {
  HF_ENDPOINT: setting(
    z
      .string()
      .url()
      .default('https://huggingface.co')
      .transform((v) => v.replace(/\/+$/, '')),
    ['the hub or a mirror to download models from', "in the hub's URL layout: ENDPOINT/ORG/NAME/resolve/REVISION/FILE"],
  ),
  MODEL_REVISION: setting(
    z
      .string()
      .regex(/^[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/, 'a branch, tag or commit id')
      .refine((v) => !v.split('/').includes('..'), 'a branch, tag or commit id')
      .default('main'),
    'branch, tag or commit id of the model on the hub; a commit id pins the weights exactly',
  ),
  // A secret: sent only to HF_ENDPOINT, never logged.
  HF_TOKEN: optionalString('token for gated and private models, sent only to HF_ENDPOINT', '(none)'),
  HF_HOME: optionalString('Hugging Face folder; downloads are cached in its hub/ folder', '~/.cache/huggingface').meta(
    ADVANCED,
  ),
  HF_HUB_CACHE: optionalString(
    "the download cache itself, in huggingface_hub's layout (models--ORG--NAME/snapshots/COMMIT/)",
    '$HF_HOME/hub',
  ).meta(ADVANCED),
  HF_HUB_OFFLINE: bool(false, [
    'load from the download cache only, never the network',
    'a model missing there fails to load, naming the files it lacks',
  ]),
};
