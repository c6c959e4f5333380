// Build of what ships in dist/ (gitignored): the `edgestr` command, the client library and the web
// console, bundled from TypeScript with esbuild, and the library's type declarations
// (dist/types, tsc with tsconfig.client.json). Runs from the `prepare` script, so `npm install`
// and `npm ci` in a checkout build it. esbuild comes with wrangler (a devDependency); an install
// without dev dependencies has no esbuild and skips the build with a notice (the command then tells
// the user to run `npm install`). Packages stay external: they resolve from node_modules at run time.
import { execFileSync } from 'node:child_process';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** One line per output: source, output, and the platform it runs on ('node': packages stay external;
 *  'browser': everything bundled, ES2022). */
const entries = [
  { in: 'src/cli/main.ts', out: 'dist/cli.js', platform: 'node' },
  { in: 'src/client/index.ts', out: 'dist/client/index.js', platform: 'node' },
  // The web console's bundle, served by the Worker through wrangler.toml [assets] (dist/console).
  { in: 'src/console/main.ts', out: 'dist/console/console.js', platform: 'browser' },
];

let esbuild;
try {
  esbuild = await import('esbuild');
} catch {
  console.warn('edgestr build skipped: esbuild is not installed (it comes with the dev dependencies; run `npm install`).');
  process.exit(0);
}

/** Writes `file` only when its bytes differ: a running `wrangler dev` serves dist/console and
 *  restarts its local runtime when that directory changes, so a rebuild of the same sources (e.g. the
 *  `prepare` that `npx edgestr` runs while tests hold a dev server) must leave it untouched. */
async function writeIfChanged(file) {
  const current = await readFile(file.path).catch(() => null);
  if (current && Buffer.compare(current, file.contents) === 0) return;
  await mkdir(dirname(file.path), { recursive: true });
  await writeFile(file.path, file.contents);
}

const jsOnly = process.argv.includes('--js-only');
const built = await Promise.all(
  entries.map((entry) =>
    esbuild.build({
      write: false,
      absWorkingDir: root,
      entryPoints: [entry.in],
      outfile: entry.out,
      bundle: true,
      format: 'esm',
      platform: entry.platform,
      target: entry.platform === 'node' ? 'node20' : 'es2022',
      packages: entry.platform === 'node' ? 'external' : undefined,
      // The browser bundle ships minified and without a source map (the Worker serves only console.js).
      sourcemap: entry.platform === 'node',
      minify: entry.platform === 'browser',
      logLevel: 'warning',
    }),
  ),
);
await Promise.all(built.flatMap((result) => result.outputFiles.map(writeIfChanged)));

// Declarations for `import … from 'edgestr/client'` in TypeScript (package.json exports "types");
// `--js-only` skips them (the e2e tests rebuild the bundles only).
if (!jsOnly) {
  await rm(join(root, 'dist', 'types'), { recursive: true, force: true });
  execFileSync(process.execPath, [createRequire(import.meta.url).resolve('typescript/bin/tsc'), '-p', 'tsconfig.client.json'], { cwd: root, stdio: 'inherit' });
}
