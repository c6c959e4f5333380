// The `edgestr` command line: parses arguments and runs one command; returns the exit code.
export async function main(argv: string[]): Promise<number> {
  process.stdout.write(`edgestr ${argv.join(' ')}\n`);
  return 0;
}
