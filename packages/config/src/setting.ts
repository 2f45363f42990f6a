import { z } from 'zod';

/**
 * Each setting is declared once, in settings/: its schema (type, bounds, default) and its help text.
 * `--help` is generated from these declarations, so a setting cannot exist without being described.
 */
export type SettingHelp = {
  description: string;
  /** The default as help prints it, where the schema's own default says less (it depends on the device, or the setting is off). */
  shown?: string;
  /**
   * An internal knob rather than a user's decision: listed after the user settings, under "Advanced".
   * A derived setting (its default computed from other settings) is always advanced.
   */
  advanced?: true;
};

export function setting<S extends z.ZodType>(schema: S, description: string, shown?: string): S {
  const help: SettingHelp = { description, ...(shown === undefined ? {} : { shown }) };
  return schema.meta(help);
}

/** Marks a setting advanced (see SettingHelp): `setting(…).meta(ADVANCED)` keeps its help and adds this. */
export const ADVANCED: Partial<SettingHelp> = { advanced: true };

/**
 * A setting whose default the loader computes from other settings (`from` says how, in help; the
 * result is at least `floor` where given), and which may still be set: a number, or undefined here.
 */
export const derived = (min: number, from: string, help: string, floor?: number) =>
  setting(
    z.coerce.number().int().min(min).optional(),
    `${help} (derived unless set${floor === undefined ? '' : `; the derived value is at least ${floor}`})`,
    from,
  ).meta(ADVANCED);

export const int = (fallback: number, min: number, help: string) =>
  setting(z.coerce.number().int().min(min).default(fallback), help);
export const bool = (fallback: boolean, help: string, shown?: string) =>
  setting(
    z
      .enum(['1', '0', 'true', 'false', 'yes', 'no', 'on', 'off'])
      .default(fallback ? 'true' : 'false')
      .transform((v) => ['1', 'true', 'yes', 'on'].includes(v)),
    help,
    shown,
  );
export const optionalString = (help: string, shown = '(off)') =>
  setting(
    z
      .string()
      .optional()
      .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim())),
    help,
    shown,
  );
