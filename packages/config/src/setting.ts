import { z } from 'zod';

/**
 * Each setting is declared once, in settings/: its schema (type, bounds, default) and its help text.
 * `--help` is generated from these declarations, so a setting cannot exist without being described.
 */
export type SettingHelp = {
  /** One line: what `--help` prints. */
  description: string;
  /** What docs/configuration.md adds to that line: the why, the interplay, the edge cases. */
  more?: string;
  /** The default as help prints it, where the schema's own default says less (it depends on the device, or the setting is off). */
  shown?: string;
  /**
   * An internal knob rather than a user's decision: listed after the user settings, under "Advanced".
   * A derived setting (its default computed from other settings) is always advanced.
   */
  advanced?: true;
};

/** A setting's help: its one line, or that line and what the docs add to it. */
export type Help = string | readonly [line: string, more: string];

export function setting<S extends z.ZodType>(schema: S, help: Help, shown?: string): S {
  const [description, more] = typeof help === 'string' ? [help] : help;
  const meta: SettingHelp = {
    description,
    ...(more === undefined ? {} : { more }),
    ...(shown === undefined ? {} : { shown }),
  };
  return schema.meta(meta);
}

/** Marks a setting advanced (see SettingHelp): `setting(…).meta(ADVANCED)` keeps its help and adds this. */
export const ADVANCED: Partial<SettingHelp> = { advanced: true };

/**
 * A setting whose default the loader computes from other settings (`from` says how, in help; the
 * result is at least `floor` where given), and which may still be set: a number, or undefined here.
 */
export const derived = (min: number, from: string, help: Help, floor?: number) =>
  setting(
    z.coerce.number().int().min(min).optional(),
    editLine(help, (line) => `${line} (derived unless set${floor === undefined ? '' : `, at least ${floor}`})`),
    from,
  ).meta(ADVANCED);

/** `help` with its one line rewritten by `edit`; what the docs add to it stays as it is. */
function editLine(help: Help, edit: (line: string) => string): Help {
  return typeof help === 'string' ? edit(help) : [edit(help[0]), help[1]];
}

export const int = (fallback: number, min: number, help: Help) =>
  setting(z.coerce.number().int().min(min).default(fallback), help);
export const bool = (fallback: boolean, help: Help, shown?: string) =>
  setting(
    z
      .enum(['1', '0', 'true', 'false', 'yes', 'no', 'on', 'off'])
      .default(fallback ? 'true' : 'false')
      .transform((v) => ['1', 'true', 'yes', 'on'].includes(v)),
    help,
    shown,
  );
export const optionalString = (help: Help, shown = '(off)') =>
  setting(
    z
      .string()
      .optional()
      .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim())),
    help,
    shown,
  );
