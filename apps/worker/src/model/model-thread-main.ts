/**
 * The model thread. onnxruntime-node runs a session synchronously on the thread that calls it, so
 * the session lives here: the worker's main thread stays free to renew job locks, send heartbeats
 * and fetch and settle jobs while a batch runs.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { Tensor } from '@huggingface/transformers';
import type { WorkerConfig } from '@tserve/config';
import type { Task } from '@tserve/contract';
import { loadSession, type SessionFile } from './model.js';
import type { ForwardRequest, SessionNames, ThreadMessage } from './model-thread-protocol.js';

const { config, task, dir, file } = workerData as { config: WorkerConfig; task: Task; dir: string; file: SessionFile };
const port = parentPort!;
const send = (message: ThreadMessage, transfer: ArrayBuffer[] = []) => port.postMessage(message, transfer);

try {
  const model = await loadSession(config, task, dir, file);
  const session = (model as unknown as { sessions: Record<string, { inputNames: string[]; outputNames: string[] }> })
    .sessions.model;
  const names: SessionNames = { inputs: [...session.inputNames], outputs: [...session.outputNames] };
  // The handler answers every failure itself ('failed'), so no rejection is left for the emitter to drop.
  // eslint-disable-next-line @typescript-eslint/no-misused-promises
  port.on('message', async (request: ForwardRequest) => {
    try {
      const dims = [request.rows, request.width];
      // Models that take no token_type_ids or position_ids have them dropped by transformers.js, which
      // also feeds empty past key values to an export that declares them.
      const outputs = (await model({
        input_ids: new Tensor('int64', request.inputIds, dims),
        attention_mask: new Tensor('int64', request.attention, dims),
        token_type_ids: new Tensor('int64', request.tokenTypes, dims),
        position_ids: new Tensor('int64', request.positions, dims),
      })) as Record<string, Tensor>;
      // Question answering has two outputs: where the answer starts, and where it ends.
      const main =
        outputs.logits ??
        outputs.start_logits ??
        outputs.last_hidden_state ??
        outputs.token_embeddings ??
        Object.values(outputs)[0];
      const data = main.data as Float32Array;
      const endLogits = outputs.end_logits?.data as Float32Array | undefined;
      const sentence = outputs.sentence_embedding;
      const sentenceData = sentence?.data as Float32Array | undefined;
      const transfer = [data, endLogits, sentenceData]
        .filter((a) => a !== undefined)
        .map((a) => a.buffer as ArrayBuffer);
      send(
        {
          kind: 'output',
          id: request.id,
          data,
          dims: main.dims,
          endLogits,
          ...(sentence ? { sentence: { data: sentenceData!, dims: sentence.dims } } : {}),
        },
        transfer,
      );
    } catch (err) {
      send({ kind: 'failed', id: request.id, message: err instanceof Error ? err.message : String(err) });
    }
  });
  send({ kind: 'ready', names });
} catch (err) {
  send({ kind: 'load-failed', message: err instanceof Error ? err.message : String(err) });
}
