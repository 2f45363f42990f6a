/**
 * The names a client may give a served model besides its id (MODEL_ALIASES): the names Ollama's
 * and Cohere's clients send by default (`nomic-embed-text`, `embed-english-v3.0`) reach a model
 * served here. Ollama names every model with a tag, `:latest` where none is given: a name with it
 * is the name without it.
 */
const LATEST = ':latest';

const untagged = (name: string) => (name.endsWith(LATEST) ? name.slice(0, -LATEST.length) : name);

export class ModelNames {
  constructor(private readonly aliases: Record<string, string>) {}

  /** The model id a name stands for: an alias's model, or the name itself (either without `:latest`). */
  resolve(name: string): string {
    return this.aliases[name] ?? this.aliases[untagged(name)] ?? untagged(name);
  }

  /** The aliases of a model id. */
  aliasesOf(id: string): string[] {
    return Object.entries(this.aliases)
      .filter(([, target]) => target === id)
      .map(([alias]) => alias);
  }
}
