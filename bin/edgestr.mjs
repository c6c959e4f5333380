#!/usr/bin/env node
// The `edgestr` command: starts the built CLI (dist/cli.js, made by `npm install` via scripts/build.mjs).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const cli = new URL('../dist/cli.js', import.meta.url);
if (!existsSync(fileURLToPath(cli))) {
  process.stderr.write('edgestr: dist/cli.js is missing; run npm install in the edgestr checkout to build it.\n');
  process.exit(1);
}
const { main } = await import(cli.href);
process.exitCode = await main(process.argv.slice(2));
