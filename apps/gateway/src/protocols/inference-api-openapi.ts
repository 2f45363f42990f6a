import { z } from 'zod';
import {
  errorBodySchema,
  optionsSchema,
  parameterSchemas,
  taskInputSchemas,
  taskOutputSchemas,
  TASKS,
  type Task,
} from '@tserve/contract';
import {
  answer,
  jsonContent,
  modelCall,
  ref,
  tag,
  type Json,
  type OpenApiOptions,
  type OpenApiPart,
} from '../http/openapi-parts.js';

/** The Inference API body for one task: its inputs and parameters, as the request path checks them. */
function taskRequest(task: Task): z.ZodType {
  const parameters = parameterSchemas[task];
  return z
    .strictObject({
      inputs: taskInputSchemas[task],
      // Candidate labels are required, so a zero-shot body needs its parameters.
      parameters: task === 'zero-shot-classification' ? parameters : parameters.optional(),
      options: optionsSchema.optional(),
    })
    .meta({ title: task });
}

const inferenceRequest = z
  .union(TASKS.map(taskRequest))
  .meta({ description: "one of the tasks' bodies: the model's task decides which" });
/** One output for a single input, or a list of them for a list of inputs; which task's is the model's. */
const inferenceAnswer = z
  .union(
    TASKS.map((task) => z.union([taskOutputSchemas[task], z.array(taskOutputSchemas[task])]).meta({ title: task })),
  )
  .meta({ description: "one output per input (the list for a list of inputs), in the model's task's shape" });

const TAG = 'Inference API';

/** The Inference API's routes in the OpenAPI document. */
export function inferenceApiOpenApi(options: OpenApiOptions): OpenApiPart {
  const call = (operationId: string, summary: string, parameters: Json[], statuses: number[], requestBody: Json) =>
    modelCall(
      options,
      errorBodySchema,
      {
        operationId,
        ...tag(TAG),
        summary,
        parameters: [...parameters, ref('parameters', 'WaitForModel')],
        requestBody,
        responses: { 200: answer("the model's outputs", jsonContent(inferenceAnswer, 'output')) },
      },
      statuses,
    );
  const json = { required: true, content: jsonContent(inferenceRequest, 'input') };
  const statuses = [400, 404, 413, 415, 422, 500, 503, 504];
  return {
    tag: TAG,
    paths: {
      '/': {
        post: call(
          'runDefaultModel',
          'run the default model: the whole body is one text, or a JSON body of the Inference API',
          [],
          [400, 413, 422, 500, 503, 504],
          {
            required: true,
            description: 'a body of any content type but JSON is read as one text (curl -d sends it as a form)',
            content: {
              'text/plain': { schema: { type: 'string', minLength: 1 } },
              ...jsonContent(inferenceRequest, 'input'),
            },
          },
        ),
      },
      '/models/{model}': {
        post: call(
          'runModel',
          'run a model (the Hugging Face Inference API)',
          [ref('parameters', 'Model')],
          statuses,
          json,
        ),
      },
      '/models/{model}/pipeline/{task}': {
        post: call(
          'runModelForTask',
          'run a model for a task it serves (an embedding model serves feature-extraction and sentence-similarity)',
          [ref('parameters', 'Model'), ref('parameters', 'Task')],
          statuses,
          json,
        ),
      },
    },
    parameters: {
      Task: {
        name: 'task',
        in: 'path',
        required: true,
        description: 'the task to run the model for',
        schema: { type: 'string', enum: [...TASKS] },
      },
      WaitForModel: {
        name: 'x-wait-for-model',
        in: 'header',
        description: 'wait for a model that is still loading, until the deadline, instead of a 503',
        schema: { type: 'string', enum: ['true', 'false', '1', '0'] },
      },
    },
  };
}
