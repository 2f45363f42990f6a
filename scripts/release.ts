/**
 * `npm run release`: the system as one archive that runs on a bare linux-x64 host, with no npm, no
 * registry and no Node.js of its own (docs/operations.md, "Release archive").
 *
 *   npm run release                 writes release/tserve-<version>-linux-x64.tar.xz
 *   npm run release -- --unpacked   stops at release/tserve/, the folder the archive holds
 *   --no-bench                      leaves the benches out (the Docker image, built without bench/)
 *
 * The folder: `bin/tserve` (the launcher, or one program: `tserve gateway|worker|keys|bench|bench-scale`),
 * `node/bin/node` (this Node.js), `lib/` (each program bundled by esbuild from its build output, with
 * the shared code in chunks), and in `lib/node_modules/` only what cannot be bundled: ONNX Runtime's
 * native library and the packages that load it, the gRPC packages and the `.proto` files, and the
 * files the dashboard and `/docs` serve; and
 * `THIRD-PARTY-LICENSES.txt`, the licenses of all it holds.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const OUT = path.join(ROOT, 'release');
const STAGE = path.join(OUT, 'tserve');
/** What the archive may weigh: one download for a host with no registry (test/release.test.ts holds it too). */
const MAX_BYTES = 50 * 1024 * 1024;
const PLATFORM = 'linux-x64';

const { values } = parseArgs({
  options: { unpacked: { type: 'boolean', default: false }, 'no-bench': { type: 'boolean', default: false } },
});

function fail(message: string): never {
  process.stderr.write(`release: ${message}\n`);
  process.exit(1);
}

function say(message: string): void {
  process.stdout.write(`release: ${message}\n`);
}

/** The Node.js that runs this script travels in the archive, so it must be one that stands alone. */
function checkRuntime(): void {
  if (`${process.platform}-${process.arch}` !== PLATFORM)
    fail(`the archive is for ${PLATFORM} and takes this host's Node.js; this is ${process.platform}-${process.arch}`);
  const variables = (process.config.variables ?? {}) as unknown as Record<string, unknown>;
  const shared = Object.entries(variables)
    .filter(([key, value]) => key.startsWith('node_shared') && value === true)
    .map(([key]) => key.replace('node_shared_', '').replace('node_shared', 'libnode'));
  if (shared.length > 0)
    fail(
      `this Node.js (${process.execPath}) links the host's ${shared.join(', ')}, so it would not run elsewhere; ` +
        'run the release with an official Node.js build (nodejs.org, nvm, or the node:20 image)',
    );
}

/** A package's folder, found as the program that uses it finds it. */
function packageDir(name: string, from: string): string {
  const require = createRequire(path.join(ROOT, from, 'package.json'));
  // Some packages export no package.json, some have no main: one of the two is there.
  let dir: string;
  try {
    dir = path.dirname(require.resolve(`${name}/package.json`));
  } catch {
    dir = path.dirname(require.resolve(name));
  }
  while (!fs.existsSync(path.join(dir, 'package.json')) || readJson(path.join(dir, 'package.json')).name !== name) {
    const up = path.dirname(dir);
    if (up === dir) fail(`cannot find ${name}'s folder from ${from}`);
    dir = up;
  }
  return dir;
}

/** A package.json: the fields the release reads of it. */
interface Manifest {
  name?: string;
  version?: string;
  license?: string;
  dependencies?: Record<string, string>;
}

function readJson(file: string): Manifest {
  return JSON.parse(fs.readFileSync(file, 'utf8')) as Manifest;
}

/** Copies `files` (paths or folders under `from`) to `lib/node_modules/<name>/`, and nothing else of it. */
function copyPackage(name: string, from: string, files: string[]): string {
  const source = packageDir(name, from);
  const target = path.join(STAGE, 'lib', 'node_modules', name);
  for (const file of ['package.json', ...files]) {
    const src = path.join(source, file);
    if (!fs.existsSync(src)) fail(`${name} has no ${file}`);
    fs.cpSync(src, path.join(target, file), {
      recursive: true,
      // Source maps and type declarations serve no one on a server.
      filter: (f) => !f.endsWith('.map') && !f.endsWith('.d.ts'),
    });
  }
  return source;
}

/**
 * The benches the big hosts run, which have no npm (bench/README.md), with the stand-ins and the
 * transformers.js module that the bench's floors start by file.
 */
const BENCHES = {
  bench: 'bench/run.ts',
  'bench-scale': 'bench/scale.ts',
  'bench-stand-in': 'bench/lib/stand-in.ts',
  'bench-transformers': 'bench/lib/transformers-bundle.ts',
};

/** Bundles the programs; returns the folders of the packages whose code went into the bundles. */
async function bundle(): Promise<string[]> {
  const { metafile } = await build({
    absWorkingDir: ROOT,
    entryPoints: {
      launcher: 'apps/launcher/dist/main.js',
      gateway: 'apps/gateway/dist/main.js',
      worker: 'apps/worker/dist/main.js',
      // The model thread's file, found beside the worker's code as in its build output.
      'model-thread-main': 'apps/worker/dist/model/model-thread-main.js',
      keys: 'apps/gateway/dist/cli/keys-cli.js',
      ...(values['no-bench'] ? {} : BENCHES),
    },
    outdir: path.join(STAGE, 'lib'),
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    // ONNX Runtime's packages load its native library by a path of their own, and the gRPC packages
    // their .proto files: they travel whole (copyNative). msgpackr's optional native reader is left
    // out; msgpackr reads without it.
    external: ['onnxruntime-node', 'onnxruntime-common', 'msgpackr-extract', ...GRPC],
    // Images are not served; transformers.js imports sharp (and its native libvips) for them alone.
    alias: { sharp: path.join(ROOT, 'scripts', 'release', 'no-sharp.js') },
    // CommonJS packages inside an ES module bundle still call require.
    banner: {
      js: "import { createRequire as tserveCreateRequire } from 'node:module';\nconst require = tserveCreateRequire(import.meta.url);",
    },
    // The licenses travel whole in THIRD-PARTY-LICENSES.txt instead (licenses()).
    legalComments: 'none',
    metafile: true,
    logLevel: 'warning',
  });
  fs.writeFileSync(path.join(STAGE, 'lib', 'package.json'), '{ "type": "module" }\n');
  // An input inside node_modules belongs to the innermost package folder on its path.
  const folders = Object.keys(metafile.inputs).flatMap((input) => {
    const match = /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(input);
    return match ? [path.join(ROOT, match[1])] : [];
  });
  return [...new Set(folders)];
}

/**
 * The gRPC packages read their own `.proto` files beside their code, so they travel whole, with
 * the packages they load: the gateway's `@grpc/grpc-js` is theirs, one copy. Left out: type
 * declarations and TypeScript sources, and what only proto-loader's command line uses (yargs).
 */
const GRPC = ['@grpc/grpc-js', '@grpc/proto-loader', 'grpc-health-check', '@grpc/reflection'];
const NOT_LOADED = new Set(['yargs', '@types/node']);

/**
 * Copies the package `name` whole, as `from` finds it, into `into` (a node_modules folder), and the
 * packages it depends on, as npm lays them out: at the top where they fit, else, where the top holds
 * another version, under the package that needs them. Returns their source folders.
 */
function copyWithDependencies(name: string, from: string, into = path.join(STAGE, 'lib', 'node_modules')): string[] {
  const source = packageDir(name, from);
  const { version, dependencies } = readJson(path.join(source, 'package.json'));
  const top = path.join(STAGE, 'lib', 'node_modules', name);
  let target = top;
  if (fs.existsSync(top)) {
    if (readJson(path.join(top, 'package.json')).version === version) return [];
    target = path.join(into, name);
    if (fs.existsSync(target)) return [];
  }
  fs.cpSync(source, target, {
    recursive: true,
    filter: (f) =>
      !f.endsWith('.map') && !f.endsWith('.ts') && !path.relative(source, f).split(path.sep).includes('node_modules'),
  });
  return [
    source,
    ...Object.keys(dependencies ?? {})
      .filter((dependency) => !NOT_LOADED.has(dependency))
      .flatMap((dependency) =>
        copyWithDependencies(dependency, path.relative(ROOT, source), path.join(target, 'node_modules')),
      ),
  ];
}

/** Copies what cannot be bundled; returns the packages' folders. */
function copyNative(): string[] {
  return [
    copyPackage('onnxruntime-node', 'node_modules/@huggingface/transformers', [
      'dist',
      `bin/napi-v6/${process.platform}/${process.arch}`,
    ]),
    copyPackage('onnxruntime-common', 'node_modules/onnxruntime-node', ['dist']),
    copyPackage('@bull-board/ui', 'node_modules/@bull-board/api', ['dist']),
    // What `/docs` serves: the page's script and style (ops/openapi.ts).
    copyPackage('swagger-ui-dist', 'apps/gateway', ['swagger-ui-bundle.js', 'swagger-ui.css']),
    // The gRPC services' .proto files, which the gateway loads from beside the contract's package.json.
    copyPackage('@tserve/contract', 'apps/gateway', ['proto']),
    ...GRPC.flatMap((name) => copyWithDependencies(name, 'apps/gateway')),
  ];
}

/** A package's license and notice files, by their usual names. */
const LICENSE_FILE = /^(licen[cs]e|copying|notice)(\.(md|txt|markdown))?$/i;

/** Where Node.js's own LICENSE is installed beside it, by the layouts of its tarball and its packages. */
function nodeLicense(): string | undefined {
  const prefix = path.resolve(path.dirname(process.execPath), '..');
  return ['LICENSE', 'share/doc/node/LICENSE', 'share/doc/nodejs/LICENSE']
    .map((file) => path.join(prefix, file))
    .find((file) => fs.existsSync(file));
}

/**
 * THIRD-PARTY-LICENSES.txt: the license texts of Node.js and of every package whose code the
 * archive holds, bundled or copied, as their licenses ask of a copy.
 */
function licenses(folders: string[]): number {
  const entries = new Map<string, string>();
  for (const folder of folders) {
    const { name, version, license } = readJson(path.join(folder, 'package.json'));
    if (!name || name.startsWith('@tserve/')) continue;
    const texts = fs
      .readdirSync(folder)
      .filter((file) => LICENSE_FILE.test(file))
      .sort()
      .map((file) => fs.readFileSync(path.join(folder, file), 'utf8').trim());
    const text =
      texts.length > 0
        ? texts.join('\n\n')
        : `(no license file in the package; package.json says: ${license ?? 'nothing'})`;
    entries.set(`${name}@${version}`, `${name} ${version} (${license ?? 'license not declared'})\n\n${text}`);
  }
  const node = nodeLicense();
  const sections = [
    `Node.js ${process.version}\n\n${node ? fs.readFileSync(node, 'utf8').trim() : `https://github.com/nodejs/node/blob/${process.version}/LICENSE`}`,
    ...[...entries.keys()].sort().map((key) => entries.get(key)!),
  ];
  fs.writeFileSync(
    path.join(STAGE, 'THIRD-PARTY-LICENSES.txt'),
    `The third-party software this archive holds, and its licenses.\n\n${sections.join(`\n\n${'='.repeat(72)}\n\n`)}\n`,
  );
  return entries.size;
}

function copyRuntime(version: string): void {
  const node = path.join(STAGE, 'node', 'bin', 'node');
  fs.mkdirSync(path.dirname(node), { recursive: true });
  fs.copyFileSync(process.execPath, node);
  fs.chmodSync(node, 0o755);
  const bin = path.join(STAGE, 'bin', 'tserve');
  fs.mkdirSync(path.dirname(bin), { recursive: true });
  fs.copyFileSync(path.join(ROOT, 'scripts', 'release', 'tserve'), bin);
  fs.chmodSync(bin, 0o755);
  fs.writeFileSync(path.join(STAGE, 'VERSION'), `tserve ${version}, Node.js ${process.version}, ${PLATFORM}\n`);
}

function archive(version: string): string {
  const file = path.join(OUT, `tserve-${version}-${PLATFORM}.tar.xz`);
  fs.rmSync(file, { force: true });
  // xz's own threads; -9 takes its time on two cores for a few MB less, -6 is the default.
  execFileSync('tar', ['-C', OUT, '-cJf', file, 'tserve'], { env: { ...process.env, XZ_OPT: '-6 -T0' } });
  return file;
}

function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

async function main(): Promise<void> {
  checkRuntime();
  const version = readJson(path.join(ROOT, 'package.json')).version ?? '0.0.0';
  if (!fs.existsSync(path.join(ROOT, 'apps/gateway/dist/main.js'))) fail('no build output: run `npm run build` first');
  fs.rmSync(STAGE, { recursive: true, force: true });
  fs.mkdirSync(STAGE, { recursive: true });
  const bundled = await bundle();
  const copied = copyNative();
  copyRuntime(version);
  say(`licenses of Node.js and ${licenses([...bundled, ...copied])} packages in THIRD-PARTY-LICENSES.txt`);
  if (values.unpacked) return say(`wrote ${path.relative(ROOT, STAGE)}/`);
  const file = archive(version);
  const bytes = fs.statSync(file).size;
  say(`wrote ${path.relative(ROOT, file)}: ${mib(bytes)}`);
  if (bytes > MAX_BYTES) fail(`the archive is ${mib(bytes)}, over its bound of ${mib(MAX_BYTES)}`);
}

await main();
