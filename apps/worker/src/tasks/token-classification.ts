import type { TokenClassificationParameters } from '@tserve/contract';
import type { LoadedModel } from '../model.js';
import type { TaskHead } from './head.js';
import { softmax } from './math.js';

interface TokenScore {
  index: number;
  id: number;
  word: string;
  probs: Float64Array;
}

interface Entity {
  label: string;
  score: number;
  ids: number[];
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

/**
 * Named-entity style token labels. `none` returns one entity per token; `simple` merges B-/I- runs;
 * `first`, `average` and `max` first merge subword pieces into words (WordPiece "##" continuation).
 */
export function tokenClassificationHead(loaded: LoadedModel): TaskHead<TokenClassificationParameters> {
  const { tokenizer } = loaded;
  const labels = loaded.config.id2label ?? {};
  const labelOf = (i: number) => labels[i] ?? `LABEL_${i}`;
  // What the tokenizer's template adds around any text ([CLS] … [SEP] for BERT): not part of the input.
  const templateIds = new Set(tokenizer.encode(''));
  const inner = (tokenizer as unknown as { _tokenizer: { id_to_token(id: number): string } })._tokenizer;
  const tokenString = (id: number) => inner.id_to_token(id) ?? tokenizer.decode([id]);
  const decodeWord = (ids: number[]) => tokenizer.decode(ids, { skip_special_tokens: false }).trim();

  function toEntity(t: TokenScore): Entity {
    const best = argmax(t.probs);
    return { label: labelOf(best), score: t.probs[best], ids: [t.id], index: t.index };
  }

  function mergeWords(tokens: TokenScore[], strategy: 'first' | 'average' | 'max'): Entity[] {
    const words: TokenScore[][] = [];
    for (const t of tokens) {
      if (t.word.startsWith('##') && words.length) words[words.length - 1].push(t);
      else words.push([t]);
    }
    return words.map((pieces) => {
      const ids = pieces.map((p) => p.id);
      if (strategy === 'first') return { ...toEntity(pieces[0]), ids };
      if (strategy === 'max') {
        const best = pieces.map(toEntity).reduce((a, b) => (b.score > a.score ? b : a));
        return { ...best, ids };
      }
      const mean = new Float64Array(pieces[0].probs.length);
      for (const p of pieces) p.probs.forEach((v, i) => (mean[i] += v / pieces.length));
      const best = argmax(mean);
      return { label: labelOf(best), score: mean[best], ids };
    });
  }

  function group(entities: Entity[]) {
    const groups: Array<{ tag: string; members: Entity[] }> = [];
    for (const e of entities) {
      const [bi, tag] = splitTag(e.label);
      const last = groups[groups.length - 1];
      if (last && last.tag === tag && bi !== 'B') last.members.push(e);
      else groups.push({ tag, members: [e] });
    }
    return groups.map((g) => ({
      entity_group: g.tag,
      score: g.members.reduce((s, m) => s + m.score, 0) / g.members.length,
      word: decodeWord(g.members.flatMap((m) => m.ids)),
      start: null,
      end: null,
    }));
  }

  return {
    decode(output, index, encoded, parameters) {
      const [, length, classes] = output.dims;
      const tokens: TokenScore[] = [];
      encoded.ids.forEach((id, t) => {
        if (templateIds.has(id) && (t === 0 || t === encoded.ids.length - 1)) return;
        const start = (index * length + t) * classes;
        tokens.push({ index: t, id, word: tokenString(id), probs: softmax(output.data.subarray(start, start + classes)) });
      });
      const strategy = parameters.aggregation_strategy ?? 'none';
      const ignore = new Set(parameters.ignore_labels ?? ['O']);
      if (strategy === 'none') {
        return tokens
          .map((t) => ({ t, e: toEntity(t) }))
          .filter(({ e }) => !ignore.has(e.label))
          .map(({ t, e }) => ({ entity: e.label, score: e.score, index: t.index, word: t.word, start: null, end: null }));
      }
      const entities = strategy === 'simple' ? tokens.map(toEntity) : mergeWords(tokens, strategy);
      return group(entities).filter((g) => !ignore.has(g.entity_group));
    },
  };
}
