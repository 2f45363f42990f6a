/**
 * What installing tserve runs and brings: every dependency's install script is one package.json's
 * `allowScripts` names (true: it may run; false: it may not), so that an install warns of none; and
 * no package whose job is to report installs or usage to a third party is anywhere in the tree. An
 * inference server is run on private networks: it carries no phone-home code.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** Packages that exist to report installs or usage (swagger-ui-dist from 5.18 depends on @scarf/scarf). */
const PHONE_HOME = ['@scarf/scarf', 'scarf-js', '@scarf/scarf-js'];

interface LockedPackage {
  version?: string;
  hasInstallScript?: boolean;
  link?: boolean;
}

const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as {
  packages: Record<string, LockedPackage>;
};
/** Every installed package, by the name it is installed under. */
const installed = Object.entries(lock.packages)
  .filter(([where, p]) => where.includes('node_modules/') && !p.link)
  .map(([where, p]) => ({ name: where.slice(where.lastIndexOf('node_modules/') + 'node_modules/'.length), ...p }));

describe('dependencies', () => {
  it('holds no package that reports installs or usage to a third party', () => {
    assert.ok(installed.length > 100, `the lock lists ${installed.length} packages`);
    const found = installed.filter((p) => PHONE_HOME.includes(p.name)).map((p) => `${p.name}@${p.version}`);
    assert.deepEqual(found, []);
  });

  it("names every dependency's install script in allowScripts, so that an install warns of none", () => {
    const { allowScripts = {} } = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
      allowScripts?: Record<string, boolean>;
    };
    const withScripts = installed.filter((p) => p.hasInstallScript);
    assert.ok(withScripts.length > 0, 'no package with an install script: is hasInstallScript still in the lock?');
    const unreviewed = withScripts.filter((p) => !(p.name in allowScripts)).map((p) => `${p.name}@${p.version}`);
    assert.deepEqual(unreviewed, []);
    const stale = Object.keys(allowScripts).filter((name) => !withScripts.some((p) => p.name === name));
    assert.deepEqual(stale, [], 'allowScripts names packages without install scripts');
  });
});
