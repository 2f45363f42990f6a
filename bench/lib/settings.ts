/**
 * A bench's `--set KEY=VALUE,...`: settings for one side's gateway and workers. Split at each pair's
 * first '=' only, since a value may hold one (NODE_OPTIONS=--flag=value).
 */
export function parseSettings(text: string): Record<string, string> {
  return Object.fromEntries(
    text
      .split(',')
      .filter(Boolean)
      .map((kv) => {
        const at = kv.indexOf('=');
        if (at < 1) throw new Error(`--set takes KEY=VALUE pairs, not "${kv}"`);
        return [kv.slice(0, at), kv.slice(at + 1)];
      }),
  );
}
