// The `edgestr` command line: parses arguments, runs one command and returns its exit code
// (DESIGN.md "The `edgestr` command"). Failures arrive here as values (Failure) and are printed
// on stderr; anything else thrown is a bug, reported as one line naming the command and the error
// (no stack: what a user can quote in a report) with exit code 1. While a command runs,
// console.warn and console.error (the library's warnings: a DVMCP client's, a relay client's,
// which quote relays and servers) go to the command's stderr through terminalSafe too.
import { format } from 'node:util';
import { agentCommand } from './agent-commands.js';
import { errorMessage } from '../shared/errors.js';
import { helpText, parseArgs } from './args.js';
import { Context, EXIT, Failure, type Io } from './context.js';
import { callCommand, cancelTurnCommand, keygenCommand, observeCommand, relayInfoCommand, signupCommand, toolsCommand, whoamiCommand } from './other-commands.js';
import { askCommand, chatCommand } from './run-commands.js';
import { terminalSafe } from './terminal-safe.js';

/** The exit code of an error main() did not expect (a bug): none of DESIGN.md's codes, which all mean something. */
const INTERNAL_ERROR = 1;

const processIo = (): Io => ({ stdin: process.stdin, stdout: process.stdout, stderr: process.stderr, env: process.env });

export async function main(argv: string[], io: Io = processIo()): Promise<number> {
  const parsed = parseArgs(argv);
  if (!parsed.ok) {
    io.stderr.write(`edgestr: ${parsed.error}\n${helpText()}`);
    return EXIT.USAGE;
  }
  const { spec, args, options } = parsed.value;
  if (options.help || !spec) {
    io.stdout.write(helpText(spec));
    return EXIT.OK;
  }
  const ctx = new Context(io, options);
  const restoreConsole = warningsTo(io);
  try {
    switch (spec.words.join(' ')) {
      case 'keygen':
        return await keygenCommand(ctx);
      case 'whoami':
        return await whoamiCommand(ctx);
      case 'signup':
        return await signupCommand(ctx);
      case 'ask':
        return await askCommand(ctx, args);
      case 'chat':
        return await chatCommand(ctx, args);
      case 'observe':
        return await observeCommand(ctx, args);
      case 'cancel-turn':
        return await cancelTurnCommand(ctx, args);
      case 'tools':
        return await toolsCommand(ctx);
      case 'call':
        return await callCommand(ctx, args);
      case 'relay info':
        return await relayInfoCommand(ctx, args);
      default:
        return await agentCommand(ctx, spec.words[1]!, args);
    }
  } catch (e) {
    if (!(e instanceof Failure)) {
      io.stderr.write(`edgestr: internal error in ${spec.words.join(' ')}: ${terminalSafe(errorMessage(e), { singleLine: true })} (a bug of edgestr: please report it)\n`);
      return INTERNAL_ERROR;
    }
    io.stderr.write(`edgestr: ${terminalSafe(e.message)}\n`); // may quote a relay's or a server's words
    return e.code;
  } finally {
    restoreConsole();
  }
}

/** Sends console.warn and console.error to `io.stderr`, control characters shown escaped, until the returned function is called. */
function warningsTo(io: Io): () => void {
  const { warn, error } = console;
  const write = (...args: unknown[]): void => void io.stderr.write(`${terminalSafe(format(...args))}\n`);
  console.warn = write;
  console.error = write;
  return () => {
    console.warn = warn;
    console.error = error;
  };
}
