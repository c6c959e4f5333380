// Runs the `edgestr` command as a user would (`node bin/edgestr.mjs …`, built from the current
// sources once per test file) with its own HOME, so that the default key file is the test's.
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const BIN = join(ROOT, 'bin', 'edgestr.mjs');

/** Builds dist/ from the current sources (what `npm install` does through `prepare`; no type declarations); the e2e global setup runs it once, before wrangler starts. */
export const build = (): void => void execFileSync('node', ['scripts/build.mjs', '--js-only'], { cwd: ROOT, stdio: 'inherit' });

export const tempHome = (): string => mkdtempSync(join(tmpdir(), 'edgestr-cli-'));

export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface Running {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  done: Promise<Ran>;
}

/** Starts `edgestr args…`; `input` (when given) is written to stdin, which is then closed. */
export function start(args: string[], opts: { home: string; url?: string; input?: string; env?: Record<string, string>; keepStdin?: boolean }): Running {
  const env: Record<string, string> = { PATH: process.env.PATH ?? '', HOME: opts.home, ...(opts.url ? { EDGESTR_URL: opts.url } : {}), ...opts.env };
  const child = spawn('node', [BIN, ...args], { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  if (opts.input !== undefined) child.stdin!.write(opts.input);
  if (!opts.keepStdin) child.stdin!.end();
  const done = new Promise<Ran>((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
  return { child, stdout: () => stdout, stderr: () => stderr, done };
}

export const edgestr = (args: string[], opts: Parameters<typeof start>[1]): Promise<Ran> => start(args, opts).done;
