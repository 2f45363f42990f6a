import type { TaskInput, TaskParameters } from '@tserve/contract';
import type { BatchOutput, Encoded, Engine } from '../model/engine.js';

/**
 * One task's reading of the model: how an input becomes model sequences, and how their rows of a
 * batched output become the client's answer. Every sequence (a text, a pair, a context window) is
 * planned and isolated by the runner like any other.
 */
export interface TaskHead<P extends TaskParameters = TaskParameters, I extends TaskInput = TaskInput> {
  /** For work that needs no model call (tokenization): the answer for one input, at once. */
  answer?(input: I, parameters: P, engine: Engine): unknown;
  /** The sequences one input runs as, in order; by default the text alone. Throws ApiError for a bad input. */
  encode?(input: I, parameters: P, engine: Engine): Encoded[];
  /** Rejects a sequence before it is batched (throws ApiError), so a bad input never reaches the model. */
  check?(encoded: Encoded, parameters: P): void;
  /** Numbers a sequence puts in its request's answer, where they can be many (token embeddings); the runner caps their sum per request (MAX_ANSWER_VALUES). */
  answerValues?(encoded: Encoded, parameters: P): number;
  /** One sequence's row of a batched output. */
  decode(output: BatchOutput, row: number, encoded: Encoded, parameters: P): unknown;
  /** The answer for one input from its sequences' decoded rows, in encode's order; by default the only one. */
  combine?(parts: unknown[], input: I, parameters: P): unknown;
}
