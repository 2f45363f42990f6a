import { z } from 'zod';
import type { SettingHelp } from './setting.js';
import { commonShape } from './settings/common.js';
import { gatewayShape } from './settings/gateway.js';
import { launcherShape } from './settings/launcher.js';
import { workerShape } from './settings/worker.js';

/** The settings described from their declarations: each program's `--help`, and docs/configuration.md's tables. */

/** The settings of each program, as `--help` lists them: `common` is every program's. */
export const SETTINGS = {
  common: commonShape,
  worker: workerShape,
  gateway: gatewayShape,
  launcher: launcherShape,
} satisfies Record<string, z.ZodRawShape>;

/** The default a setting's schema fills in, found under its transforms and optional wrappers. */
function schemaDefault(schema: z.core.$ZodType): unknown {
  const def = schema._zod.def as {
    type: string;
    defaultValue?: unknown;
    in?: z.core.$ZodType;
    innerType?: z.core.$ZodType;
  };
  if (def.type === 'default') return def.defaultValue;
  if (def.type === 'pipe' && def.in) return schemaDefault(def.in);
  if ((def.type === 'optional' || def.type === 'nullable') && def.innerType) return schemaDefault(def.innerType);
  return undefined;
}

/** A setting's help, as `setting` and `.meta(ADVANCED)` registered it. */
function meta(schema: z.core.$ZodType): Partial<SettingHelp> {
  return z.globalRegistry.get(schema) ?? {};
}

/** Whether a setting is advanced (an internal knob or a derived setting) rather than a user's decision. */
export function isAdvanced(schema: z.core.$ZodType): boolean {
  return meta(schema).advanced === true;
}

/** One setting's help row: name, default as shown, description. */
export function settingHelp(name: string, schema: z.core.$ZodType): [string, string, string] {
  const { description, shown } = meta(schema);
  if (!description) throw new Error(`setting ${name} has no help text`);
  const value = schemaDefault(schema);
  return [
    name,
    shown ?? (value === undefined ? '(none)' : typeof value === 'string' ? value : JSON.stringify(value)),
    description,
  ];
}

type Section = keyof typeof SETTINGS;

/** The settings of `sections`, user settings then advanced ones, each in declaration order. */
function tiers(sections: Section[]): {
  user: Array<[string, z.core.$ZodType]>;
  advanced: Array<[string, z.core.$ZodType]>;
} {
  const all = sections.flatMap((section) => Object.entries(SETTINGS[section] as Record<string, z.core.$ZodType>));
  return {
    user: all.filter(([, schema]) => !isAdvanced(schema)),
    advanced: all.filter(([, schema]) => isAdvanced(schema)),
  };
}

const ADVANCED_NOTE =
  'internal knobs whose defaults suit most deployments; a derived one follows the settings its default names, unless it is set';

export function formatHelp(title: string, sections: Section[]): string {
  // A setting of two programs (MODEL: the launcher's list, the worker's id) is printed once, with
  // the meaning of the first section that lists it: the program whose help this is.
  const seen = new Set<string>();
  const rows = (settings: Array<[string, z.core.$ZodType]>) =>
    settings
      .map(([name, schema]) => settingHelp(name, schema))
      .filter(([name]) => !seen.has(name) && Boolean(seen.add(name)));
  const { user, advanced } = tiers(sections);
  const [userRows, advancedRows] = [rows(user), rows(advanced)];
  const width = Math.max(...[...userRows, ...advancedRows].map(([name]) => name.length));
  const defWidth = Math.max(...[...userRows, ...advancedRows].map(([, def]) => def.length));
  const lines = (list: Array<[string, string, string]>) =>
    list.map(([name, def, what]) => `  ${name.padEnd(width)}  ${def.padEnd(defWidth)}  ${what}`);
  return [
    title,
    '',
    'Settings (environment variables):',
    ...lines(userRows),
    ...(advancedRows.length > 0 ? ['', `Advanced settings (${ADVANCED_NOTE}):`, ...lines(advancedRows)] : []),
    '',
  ].join('\n');
}

const SECTION_TITLES: Record<Section, string> = {
  common: 'Every program',
  gateway: 'Gateway (`node apps/gateway/dist/main.js`)',
  worker: 'Worker (`node apps/worker/dist/main.js`)',
  launcher:
    '`npm start` (`node apps/launcher/dist/main.js`), which passes every other setting on to the gateway and workers it starts',
};

/** docs/configuration.md's settings tables, one per program and tier, from the same declarations as `--help`. */
export function formatSettingsMarkdown(): string {
  const cell = (text: string) => text.replaceAll('|', '\\|');
  // A derived default names the settings it follows: those names in code type, the rest as words.
  const value = (shown: string) =>
    shown.startsWith('(')
      ? shown
      : /[A-Z]_[A-Z]/.test(shown)
        ? shown.replace(/\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b/g, '`$&`')
        : `\`${shown}\``;
  const tables = (tier: 'user' | 'advanced') =>
    (Object.keys(SECTION_TITLES) as Section[])
      .map((section) => [section, tiers([section])[tier]] as const)
      .filter(([, settings]) => settings.length > 0)
      .map(([section, settings]) =>
        [
          `${SECTION_TITLES[section]}:`,
          '',
          '| setting | default | meaning |',
          '|---|---|---|',
          ...settings.map(([name, schema]) => {
            const [, shown, description] = settingHelp(name, schema);
            const more = meta(schema).more;
            return `| \`${name}\` | ${cell(value(shown))} | ${cell(more === undefined ? description : `${description}<br>${more}`)} |`;
          }),
        ].join('\n'),
      )
      .join('\n\n');
  return [
    '## User settings',
    tables('user'),
    '## Advanced settings',
    `\`--help\` lists these after the user settings: ${ADVANCED_NOTE}.`,
    tables('advanced'),
  ].join('\n\n');
}
