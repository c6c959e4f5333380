// The README's transcript of the `edgestr` command is what the command prints: each `$ npx edgestr …`
// line of the block after the `cli-transcript` marker runs (as `node bin/edgestr.mjs …`, against the
// development instance, in a fresh HOME) and its stdout must match the lines below it, with npubs
// shown as `npub1…` and hex keys as `<hex>`. `chat` (interactive) is run with empty input. The
// library example (the `js` block after the `client-example` marker) runs as a program in the
// checkout, where `edgestr/client` resolves to the package itself.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { edgestr, ROOT, tempHome } from './cli-run.js';

const devUrl = inject('httpUrl');


/** The transcript: commands with their expected output lines. */
const readme = (): string => readFileSync(join(ROOT, 'README.md'), 'utf8');

/** The fenced block of `lang` after `marker`. */
function blockAfter(marker: string, lang: string): string {
  const text = readme();
  const after = text.slice(text.indexOf(marker));
  const from = after.indexOf(`\`\`\`${lang}\n`) + `\`\`\`${lang}\n`.length;
  return after.slice(from, after.indexOf('\n```', from));
}

function transcript(): Array<{ args: string[]; expected: string[] }> {
  const block = blockAfter('<!-- cli-transcript', 'console');
  const steps: Array<{ args: string[]; expected: string[] }> = [];
  for (const line of block.split('\n')) {
    if (line.startsWith('$ npx edgestr ')) steps.push({ args: shellWords(line.slice('$ npx edgestr '.length)), expected: [] });
    else steps.at(-1)!.expected.push(line);
  }
  return steps;
}

/** Splits a command line into words: spaces separate, single quotes group. */
function shellWords(s: string): string[] {
  return [...s.matchAll(/'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2]!);
}

const normalise = (out: string): string[] =>
  out
    .replace(/npub1[02-9ac-hj-np-z]{58}/g, 'npub1…')
    .replace(/\b[0-9a-f]{64}\b/g, '<hex>')
    .split('\n')
    .filter((l, i, all) => l !== '' || i < all.length - 1);

describe('README: the `edgestr` command', () => {
  it('the transcript is what the command prints', async () => {
    const steps = transcript();
    expect(steps.map((s) => s.args[0])).toEqual(['keygen', 'whoami', 'ask', 'ask', 'chat']);
    const home = tempHome();
    for (const step of steps) {
      const r = await edgestr(step.args, { home, url: devUrl, input: '' });
      expect(r.code, `${step.args.join(' ')}: ${r.stderr}`).toBe(0);
      expect(normalise(r.stdout), step.args.join(' ')).toEqual(step.expected);
    }
  }, 30_000);
});

describe('README: the client library example', () => {
  it('runs and streams the demo agent\'s answer', async () => {
    const code = blockAfter('<!-- client-example', 'js');
    expect(code).toContain("from 'edgestr/client'");
    const { stdout } = await promisify(execFile)('node', ['--input-type=module', '-e', code], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', EDGESTR_URL: devUrl },
      timeout: 20_000,
    });
    expect(stdout).toBe('echo: hello\nresponse\n');
  }, 30_000);
});
