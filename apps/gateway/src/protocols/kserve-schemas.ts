import { z } from 'zod';

/** The shapes of the KServe v2 bodies: what its routes parse, and what the OpenAPI document describes. */

export const errorBody = z.strictObject({ error: z.string() });

const parameters = z.record(z.string(), z.unknown()).optional();
export const inferRequest = z
  .object({
    id: z.string().optional(),
    parameters,
    inputs: z
      .array(
        z
          .object({
            name: z.string({ error: 'each input needs a name' }),
            shape: z.array(z.number().int().min(0), { error: 'each input needs a shape: a list of sizes' }),
            datatype: z.string({ error: 'each input needs a datatype' }),
            parameters,
            data: z.array(z.unknown(), { error: 'each input needs data: a list (row-major, may be nested)' }),
          })
          .strict(),
        { error: 'inputs must be a list of tensors' },
      )
      .length(1, 'send exactly one input tensor: the texts, datatype BYTES'),
    outputs: z.array(z.object({ name: z.string(), parameters }).strict()).optional(),
  })
  .strict();

const tensorMetadata = z.strictObject({ name: z.string(), datatype: z.string(), shape: z.array(z.number().int()) });
export const modelMetadata = z.strictObject({
  name: z.string(),
  versions: z.array(z.string()),
  platform: z.string(),
  inputs: z.array(tensorMetadata),
  outputs: z.array(tensorMetadata),
  parameters: z.strictObject({
    labels: z.array(z.string()).optional(),
    revision: z.string().optional(),
    weights_sha256: z.string().optional(),
  }),
});
const inferResponse = z.strictObject({
  model_name: z.string(),
  model_version: z.string(),
  id: z.string().optional(),
  outputs: z.array(
    z.union([
      z.strictObject({
        name: z.string(),
        datatype: z.literal('FP32'),
        shape: z.array(z.number().int()),
        data: z.array(z.number()),
      }),
      z
        .strictObject({
          name: z.string(),
          datatype: z.literal('BYTES'),
          shape: z.array(z.number().int()),
          data: z.array(z.string()),
        })
        .meta({
          description:
            'an output asked for with parameters.classification k: per row, the k largest as "value:index:label"',
        }),
      z
        .strictObject({
          name: z.string(),
          datatype: z.enum(['FP32', 'BYTES']),
          shape: z.array(z.number().int()),
          parameters: z.strictObject({ binary_data_size: z.number().int() }),
        })
        .meta({ description: 'an output sent as binary data, after the JSON header' }),
    ]),
  ),
});
export const serverMetadata = z.strictObject({
  name: z.string(),
  version: z.string(),
  extensions: z.array(z.string()),
});

/** The shapes of this protocol's bodies, for the OpenAPI document. */
export const kserveSchemas = {
  serverMetadata,
  live: z.strictObject({ live: z.boolean() }),
  ready: z.strictObject({ ready: z.boolean() }),
  modelReady: z.strictObject({ name: z.string(), ready: z.boolean() }),
  modelMetadata,
  inferRequest,
  inferResponse,
  error: errorBody,
};
