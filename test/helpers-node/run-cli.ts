// Runs the `edgestr` command in this process (src/cli/main.ts) with an empty stdin, the given
// environment (nothing of the test runner's), and its stdout and stderr collected as text.
import { PassThrough, Writable } from 'node:stream';
import { main } from '../../src/cli/main.js';

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

export async function runCli(argv: string[], env: Record<string, string> = {}): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const sink = (append: (s: string) => void): Writable =>
    new Writable({
      write(chunk: Buffer | string, _enc, cb) {
        append(chunk.toString());
        cb();
      },
    });
  const stdin = new PassThrough();
  stdin.end();
  const code = await main(argv, { stdin, stdout: sink((s) => (stdout += s)), stderr: sink((s) => (stderr += s)), env });
  return { code, stdout, stderr };
}
