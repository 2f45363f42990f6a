import type { Worker } from 'node:worker_threads';
import type { LoadedModel } from './model.js';
import type { ForwardRequest, ThreadMessage } from './model-thread-protocol.js';
import { pairLengths, tokenBoundaries, tokensForCut, type PairTruncation, type TokenBoundary } from './truncation.js';
import { batchTensors, leftAligned } from './batch-tensors.js';

export type { PairTruncation } from './truncation.js';

/** A model call's main output; question answering's second output (`endLogits`) is shaped like `data`, the start logits. */
export interface BatchOutput {
  data: Float32Array;
  dims: number[];
  endLogits?: Float32Array;
  /** A sentence-transformers export's own embeddings, [rows, width], where its graph has them (sentence_embedding). */
  sentence?: { data: Float32Array; dims: number[] };
}

/** One model sequence after tokenization: what the batch planner and the task heads work from. */
export interface Encoded {
  /** The text (the first text of a pair) that errors and warnings quote. */
  text: string;
  ids: number[];
  /** Segment of each token (token_type_ids); all 0 when absent. */
  typeIds?: number[];
  /** Token count before truncation, when a text was cut; `atLeast` when only the part of a long text the cut keeps was read. */
  truncatedFrom?: { tokens: number; atLeast: boolean };
  /** A text not to be cut was read only as far as showed it past the position table: `ids` is its start, and it is refused. */
  readInPart?: true;
  /** What a task head needs to read this sequence's output back (a question-answering span's window). */
  note?: unknown;
}

/** How single texts are cut: keep the first tokens (right) or the last (left, TEI's truncation_direction). */
export interface TextTruncation {
  truncate: boolean;
  direction?: 'right' | 'left';
}

/** transformers.js's inner tokenizer: tokenization without special tokens, and the template that adds them. */
interface InnerTokenizer {
  encode_text(text: string): string[];
  post_processor?:
    | ((
        first: string[],
        second: string[] | null,
        addSpecial: boolean,
      ) => { tokens: string[]; token_type_ids?: number[] })
    | null;
  added_tokens_map: Map<string, { id: number }>;
  /** tokenizer.json. */
  tokenizer?: Parameters<typeof tokenBoundaries>[0];
  model: { tokens_to_ids: Map<string, number>; unk_token_id?: number; vocab?: string[] };
}

/**
 * Tokenizes texts and text pairs one sequence at a time (their lengths drive batching), cutting
 * them to the model's length as the Hugging Face tokenizers do (the special tokens stay), and runs
 * padded batches on the model thread (model-thread.ts starts it), one call at a time, answered in
 * order, their tensors padded to the batch's own longest sequence (batch-tensors.ts). The model's
 * main output comes back as [batch, classes] or [batch, length, width].
 */
export class Engine {
  /** Milliseconds spent in model calls (`forward`), warm-up included. */
  busyMs = 0;
  /** Padded tokens (rows × longest) of the largest model call so far: what its tensors grew with. */
  largestCallTokens = 0;
  private readonly padId: number;
  private readonly inner: InnerTokenizer;
  /** Special tokens the template adds around one text, and around a pair. */
  private readonly specials: { single: number; pair: number };
  /** Where a long text that will be cut may be cut, to tokenize only as far as the cut needs (see tokensForCut); undefined: read whole. */
  private readonly cutBoundary: TokenBoundary | undefined;
  /** The first text of the last pair and its tokens, read once for all the pairs that share it. */
  private lastFirst?: {
    text: string;
    cut?: { keep: number; direction: 'right' | 'left' };
    read: { tokens: string[]; whole: boolean };
  };
  private nextCall = 0;
  /** Model calls sent to the thread and not yet answered, by id. */
  private readonly calls = new Map<number, { resolve: (o: BatchOutput) => void; reject: (e: Error) => void }>();

  constructor(
    readonly loaded: LoadedModel,
    private readonly thread: Worker,
  ) {
    this.padId = loaded.tokenizer.pad_token_id ?? 0;
    this.inner = (loaded.tokenizer as unknown as { _tokenizer: InnerTokenizer })._tokenizer;
    this.specials = { single: this.build([]).ids.length, pair: this.build([], []).ids.length };
    this.cutBoundary = tokenBoundaries(this.inner.tokenizer);
    thread.on('message', (message: ThreadMessage) => this.answered(message));
  }

  /** Tokens of a text without special tokens. */
  pieces(text: string): string[] {
    return this.inner.encode_text(text) ?? [];
  }

  /**
   * The model's sequence for one text, or a pair, from their tokens: special tokens and segments
   * added. `at` is where the last text's tokens (the second of a pair) begin in it.
   */
  build(first: string[], second?: string[]): { ids: number[]; typeIds: number[]; at: number } {
    const processed = this.inner.post_processor?.(first, second ?? null, true);
    const tokens = processed?.tokens ?? [...first, ...(second ?? [])];
    const ids = tokens.map((t) => this.idOf(t));
    const typeIds = processed?.token_type_ids ?? [...first.map(() => 0), ...(second ?? []).map(() => 1)];
    return {
      ids,
      typeIds: typeIds.length === ids.length ? typeIds : ids.map(() => 0),
      at: lastRun(tokens, second ?? first),
    };
  }

  idOf(token: string): number {
    return (
      this.inner.added_tokens_map.get(token)?.id ??
      this.inner.model.tokens_to_ids.get(token) ??
      this.inner.model.unk_token_id ??
      0
    );
  }

  tokenString(id: number): string {
    return this.inner.model.vocab?.[id] ?? this.loaded.tokenizer.decode([id]);
  }

  /** The text of token ids, as Hugging Face tokenizers decode them: ids neither the vocabulary nor the added tokens hold are left out. */
  text(ids: number[], skipSpecialTokens: boolean): string {
    const added = new Set([...this.inner.added_tokens_map.values()].map((token) => token.id));
    const known = ids.filter((id) => this.inner.model.vocab?.[id] !== undefined || added.has(id));
    return known.length ? this.loaded.tokenizer.decode(known, { skip_special_tokens: skipSpecialTokens }) : '';
  }

  /** How many special tokens surround one text (`pair` false) or a pair. */
  specialTokens(pair: boolean): number {
    return pair ? this.specials.pair : this.specials.single;
  }

  encode(text: string, truncation: boolean | TextTruncation): Encoded {
    const { truncate, direction = 'right' } = typeof truncation === 'boolean' ? { truncate: truncation } : truncation;
    const budget = this.loaded.maxLength - this.specials.single;
    const { tokens, whole } = this.read(
      text,
      truncate ? { keep: budget, direction } : this.pastPositions(this.specials.single),
    );
    if (!truncate) return { text, ...this.build(tokens), ...(whole ? {} : { readInPart: true }) };
    if (tokens.length <= budget) return { text, ...this.build(tokens) };
    const kept = direction === 'left' ? tokens.slice(tokens.length - budget) : tokens.slice(0, budget);
    return {
      text,
      ...this.build(kept),
      truncatedFrom: { tokens: tokens.length + this.specials.single, atLeast: !whole },
    };
  }

  /**
   * One sequence of two texts; with truncation off (or an impossible cut) it may exceed the model's
   * length, and is then refused. A left cut keeps each text's last tokens. With truncation on,
   * `secondMost` caps the second text first (a rerank document's own limit), then the pair is cut.
   */
  encodePair(
    first: string,
    second: string,
    truncation: PairTruncation | false,
    direction: 'right' | 'left' = 'right',
    secondMost?: number,
  ): Encoded {
    const budget = this.loaded.maxLength - this.specials.pair;
    const cut = truncation ? { keep: budget, direction } : this.pastPositions(this.specials.pair);
    const keep = (tokens: string[], n: number) =>
      direction === 'left' ? tokens.slice(tokens.length - n) : tokens.slice(0, n);
    // A zero-shot input, or a rerank query, is the first text of one pair per label or text.
    if (
      this.lastFirst?.text !== first ||
      this.lastFirst.cut?.direction !== cut?.direction ||
      this.lastFirst.cut?.keep !== cut?.keep
    ) {
      this.lastFirst = { text: first, cut, read: this.read(first, cut) };
    }
    let a = this.lastFirst.read;
    const secondCap = truncation && secondMost !== undefined && secondMost < budget ? secondMost : undefined;
    let b = this.read(second, secondCap === undefined ? cut : { keep: secondCap, direction });
    // The second text as read before its own cap: what a truncation reports.
    const secondBefore = { tokens: b.tokens.length, whole: b.whole };
    if (secondCap !== undefined && b.tokens.length > secondCap) b = { tokens: keep(b.tokens, secondCap), whole: true };
    const secondCut = secondBefore.tokens !== b.tokens.length;
    if (!truncation)
      return { text: first, ...this.build(a.tokens, b.tokens), ...(a.whole && b.whole ? {} : { readInPart: true }) };
    // A text read only in part has at least the tokens read. Where the cut turns on more than that,
    // it is read whole: which text is longer, when longest_first gives it the odd token; or the
    // true length, for an impossible cut, refused with it.
    if (!(a.whole && b.whole)) {
      const [lengthA, lengthB] = [a.tokens.length, b.tokens.length];
      const impossible = pairLengths(lengthA, lengthB, budget, truncation) === undefined;
      const orderUnknown =
        truncation === 'longest_first' &&
        ((!a.whole && (!b.whole || lengthB >= lengthA)) || (!b.whole && lengthA > lengthB));
      if (impossible || orderUnknown) {
        if (!a.whole) a = this.lastFirst.read = this.read(first, undefined);
        if (!b.whole) b = this.read(second, undefined);
      }
    }
    const lengths = pairLengths(a.tokens.length, b.tokens.length, budget, truncation);
    const truncatedFrom = {
      tokens: a.tokens.length + (secondCut ? secondBefore.tokens : b.tokens.length) + this.specials.pair,
      atLeast: !(a.whole && (secondCut ? secondBefore.whole : b.whole)),
    };
    if (!lengths || (lengths[0] === a.tokens.length && lengths[1] === b.tokens.length))
      return { text: first, ...this.build(a.tokens, b.tokens), ...(secondCut && lengths ? { truncatedFrom } : {}) };
    return {
      text: first,
      ...this.build(keep(a.tokens, lengths[0]), keep(b.tokens, lengths[1])),
      truncatedFrom,
    };
  }

  /** A text's first `count` tokens, tokenizing only as far as they take. */
  leadingPieces(text: string, count: number): string[] {
    return this.read(text, { keep: count, direction: 'right' }).tokens.slice(0, count);
  }

  /**
   * For a text not to be cut: a read that stops once the text alone overflows the position table
   * beside `specials`, where the runner refuses it, so that an over-long text costs a few hundred
   * tokens' reading, not a megabyte's. Undefined where the table is unknown: read whole.
   */
  private pastPositions(specials: number): { keep: number; direction: 'right' } | undefined {
    return this.loaded.positions === undefined
      ? undefined
      : { keep: this.loaded.positions - specials + 1, direction: 'right' };
  }

  /** A text's tokens: whole, or where a cut will keep `keep` of them, as far as that takes (tokensForCut). */
  private read(
    text: string,
    cut: { keep: number; direction: 'right' | 'left' } | undefined,
  ): { tokens: string[]; whole: boolean } {
    if (!cut || !this.cutBoundary) return { tokens: this.pieces(text), whole: true };
    return tokensForCut(text, cut.keep, cut.direction, (part) => this.pieces(part), this.cutBoundary);
  }

  /**
   * Runs one padded batch. Sequences are padded on the tokenizer's side; a left-padded output's
   * token rows are moved back to start at 0, so every head reads token t of a sequence at t.
   */
  async forward(batch: Encoded[]): Promise<BatchOutput> {
    const side = this.loaded.paddingSide;
    const tensors = batchTensors(batch, this.padId, side);
    const { rows, width } = tensors;
    this.largestCallTokens = Math.max(this.largestCallTokens, rows * width);
    const started = performance.now();
    const id = this.nextCall++;
    const request: ForwardRequest = { id, ...tensors };
    try {
      const output = await new Promise<BatchOutput>((resolve, reject) => {
        this.calls.set(id, { resolve, reject });
        const { inputIds, attention, tokenTypes, positions } = tensors;
        const buffers = [inputIds.buffer, attention.buffer, tokenTypes.buffer, positions.buffer] as ArrayBuffer[];
        this.thread.postMessage(request, buffers);
      });
      return side === 'left' ? leftAligned(output, batch) : output;
    } finally {
      this.busyMs += performance.now() - started;
    }
  }

  private answered(message: ThreadMessage): void {
    if (message.kind !== 'output' && message.kind !== 'failed') return;
    const call = this.calls.get(message.id);
    this.calls.delete(message.id);
    if (message.kind === 'output')
      call?.resolve({
        data: message.data,
        dims: message.dims,
        endLogits: message.endLogits,
        sentence: message.sentence,
      });
    else call?.reject(new Error(message.message));
  }
}

/** Where `part` last occurs as a run in `tokens` (the template only adds tokens around it). */
function lastRun(tokens: string[], part: string[]): number {
  for (let i = tokens.length - part.length; i >= 0; i--) if (part.every((t, k) => tokens[i + k] === t)) return i;
  return -1;
}
