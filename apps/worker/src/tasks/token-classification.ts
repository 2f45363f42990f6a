import { softmax, type TokenClassificationParameters } from '@tserve/contract';
import type { BatchOutput, Encoded } from '../model/engine.js';
import type { LoadedModel } from '../model/model.js';
import type { TaskHead } from './head.js';
import { alignTokens, sliceCodePoints, tokenizerParts, type Span } from './offsets.js';

interface TokenScore {
  index: number;
  id: number;
  word: string;
  probs: Float64Array;
  span: Span | null;
}

interface Entity {
  label: string;
  score: number;
  ids: number[];
  spans: Array<Span | null>;
  index?: number;
}

/** "B-PER" → ["B", "PER"]; a label without a prefix continues its kind, as in the HF pipeline. */
function splitTag(label: string): [string, string] {
  if (label.startsWith('B-') || label.startsWith('I-')) return [label[0], label.slice(2)];
  return ['I', label];
}

function argmax(values: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best;
}

/** A class's label by its index: the config's id2label, else the transformers default. */
type LabelOf = (index: number) => string;

function toEntity(t: TokenScore, labelOf: LabelOf): Entity {
  const best = argmax(t.probs);
  return { label: labelOf(best), score: t.probs[best], ids: [t.id], spans: [t.span], index: t.index };
}

/** Where a run of tokens lies in the input: from its first token's start to its last token's end. */
function extent(spans: Array<Span | null>): Span | null {
  const first = spans[0];
  const last = spans[spans.length - 1];
  return first && last ? [first[0], last[1]] : null;
}

/** `none`: one entity per token, as the pipeline reports them. */
function tokenEntities(tokens: TokenScore[], ignore: Set<string>, labelOf: LabelOf) {
  return tokens
    .map((t) => ({ t, e: toEntity(t, labelOf) }))
    .filter(({ e }) => !ignore.has(e.label))
    .map(({ t, e }) => ({
      entity: e.label,
      score: e.score,
      index: t.index,
      word: t.word,
      start: t.span?.[0] ?? null,
      end: t.span?.[1] ?? null,
    }));
}

function mergeWords(tokens: TokenScore[], strategy: 'first' | 'average' | 'max', labelOf: LabelOf): Entity[] {
  const words: TokenScore[][] = [];
  for (const t of tokens) {
    if (t.word.startsWith('##') && words.length) words[words.length - 1].push(t);
    else words.push([t]);
  }
  return words.map((pieces) => {
    const ids = pieces.map((p) => p.id);
    const spans = pieces.map((p) => p.span);
    if (strategy === 'first') return { ...toEntity(pieces[0], labelOf), ids, spans };
    if (strategy === 'max') {
      const best = pieces.map((p) => toEntity(p, labelOf)).reduce((a, b) => (b.score > a.score ? b : a));
      return { ...best, ids, spans };
    }
    const mean = new Float64Array(pieces[0].probs.length);
    for (const p of pieces) p.probs.forEach((v, i) => (mean[i] += v / pieces.length));
    const best = argmax(mean);
    return { label: labelOf(best), score: mean[best], ids, spans };
  });
}

function group(entities: Entity[], text: string, decodeWord: (ids: number[]) => string) {
  const groups: Array<{ tag: string; members: Entity[] }> = [];
  for (const e of entities) {
    const [bi, tag] = splitTag(e.label);
    const last = groups[groups.length - 1];
    if (last && last.tag === tag && bi !== 'B') last.members.push(e);
    else groups.push({ tag, members: [e] });
  }
  return groups.map((g) => {
    const span = extent(g.members.flatMap((m) => m.spans));
    return {
      entity_group: g.tag,
      score: g.members.reduce((s, m) => s + m.score, 0) / g.members.length,
      // The input's own text where it can be located; the decoded tokens otherwise.
      word: span ? sliceCodePoints(text, span) : decodeWord(g.members.flatMap((m) => m.ids)),
      start: span?.[0] ?? null,
      end: span?.[1] ?? null,
    };
  });
}

/**
 * Named-entity style token labels. `none` returns one entity per token; `simple` merges B-/I- runs;
 * `first`, `average` and `max` first merge subword pieces into words (WordPiece "##" continuation).
 * Every entity carries `start`/`end`: code-point offsets into the input (see offsets.ts).
 */
export function tokenClassificationHead(loaded: LoadedModel): TaskHead<TokenClassificationParameters, string> {
  const { tokenizer } = loaded;
  const labels = loaded.config.id2label ?? {};
  const labelOf = (i: number) => labels[i] ?? `LABEL_${i}`;
  // What the tokenizer's template adds around any text ([CLS] … [SEP] for BERT): not part of the input.
  const templateIds = new Set(tokenizer.encode(''));
  const inner = (tokenizer as unknown as { _tokenizer: { id_to_token(id: number): string } })._tokenizer;
  const parts = tokenizerParts(tokenizer);
  const tokenString = (id: number) => inner.id_to_token(id) ?? tokenizer.decode([id]);
  const decodeWord = (ids: number[]) => tokenizer.decode(ids, { skip_special_tokens: false }).trim();

  /** The input's own tokens in a row of the output: each one's class probabilities, and where it lies in the input. */
  function scoreTokens(output: BatchOutput, index: number, encoded: Encoded): TokenScore[] {
    const [, length, classes] = output.dims;
    const positions: number[] = [];
    encoded.ids.forEach((id, t) => {
      if (!(templateIds.has(id) && (t === 0 || t === encoded.ids.length - 1))) positions.push(t);
    });
    const words = positions.map((t) => tokenString(encoded.ids[t]));
    const spans = alignTokens(encoded.text, words, parts);
    return positions.map((t, k) => {
      const start = (index * length + t) * classes;
      return {
        index: t,
        id: encoded.ids[t],
        word: words[k],
        probs: softmax(output.data.subarray(start, start + classes)),
        span: spans[k],
      };
    });
  }

  return {
    decode(output, index, encoded, parameters) {
      const tokens = scoreTokens(output, index, encoded);
      const strategy = parameters.aggregation_strategy ?? 'none';
      const ignore = new Set(parameters.ignore_labels ?? ['O']);
      if (strategy === 'none') return tokenEntities(tokens, ignore, labelOf);
      const entities =
        strategy === 'simple' ? tokens.map((t) => toEntity(t, labelOf)) : mergeWords(tokens, strategy, labelOf);
      return group(entities, encoded.text, decodeWord).filter((g) => !ignore.has(g.entity_group));
    },
  };
}
