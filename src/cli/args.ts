// Argument parsing of the `edgestr` command: the command table (names, options, positionals, help
// text) and a parser that turns argv into a command with its options, or a usage error (exit 2).
import { err, ok, type Result } from '../shared/errors.js';

export type OptionKind = 'string' | 'list' | 'flag';

export interface CommandSpec {
  /** Words of the command, e.g. ['agent', 'create']. */
  words: string[];
  /** Positional arguments, e.g. ['<agent>', '[prompt]']; a trailing '…' takes the rest. */
  args: string[];
  options: Record<string, OptionKind>;
  summary: string;
}

const GLOBAL: Record<string, OptionKind> = { url: 'string', key: 'string', json: 'flag', help: 'flag' };
const AGENT_FIELDS: Record<string, OptionKind> = { name: 'string', about: 'string', provider: 'string', model: 'list', system: 'string', tool: 'list', 'web-fetch-host': 'list' };

export const COMMANDS: CommandSpec[] = [
  { words: ['keygen'], args: [], options: { force: 'flag' }, summary: 'write a new key (mode 0600) and print its npub' },
  { words: ['whoami'], args: [], options: {}, summary: 'the npub and hex of the key in use' },
  { words: ['signup'], args: [], options: {}, summary: 'become an owner on the deployment with the key in use (where sign-up is open)' },
  { words: ['agent', 'create'], args: [], options: AGENT_FIELDS, summary: 'create an agent (--name N [--provider P] [--model M]… [--system TEXT] [--tool T]… [--web-fetch-host H]…) and attest it (NIP-OA)' },
  { words: ['agent', 'list'], args: [], options: {}, summary: 'your agents' },
  { words: ['agent', 'show'], args: ['<agent>'], options: {}, summary: 'one agent' },
  { words: ['agent', 'update'], args: ['<agent>'], options: AGENT_FIELDS, summary: 'change an agent (same options as create)' },
  { words: ['agent', 'delete'], args: ['<agent>'], options: {}, summary: 'delete an agent' },
  { words: ['ask'], args: ['<agent>', '[prompt]'], options: { session: 'string', model: 'string', timeout: 'string' }, summary: 'one prompt (from stdin when absent); the answer streamed to stdout' },
  { words: ['chat'], args: ['<agent>'], options: { session: 'string', model: 'string', timeout: 'string' }, summary: 'interactive chat; Ctrl-C cancels the running turn, Ctrl-D leaves' },
  { words: ['observe'], args: ['[agent]'], options: {}, summary: "your agents' live NIP-AO frames, one line each, gaps shown" },
  { words: ['cancel-turn'], args: ['<agent>', '<run>'], options: {}, summary: "cancel an agent's run as its owner (NIP-AO control frame)" },
  { words: ['tools'], args: [], options: {}, summary: 'DVMCP servers and tools announced on the relay' },
  { words: ['call'], args: ['<server>', '<tool>', '[k=v]…'], options: { 'max-sats': 'string', timeout: 'string' }, summary: 'call a DVMCP tool (progress on stderr; payments up to --max-sats, default 0)' },
  { words: ['relay', 'info'], args: ['[url]'], options: {}, summary: 'the NIP-11 document' },
];

export interface Parsed {
  spec: CommandSpec | undefined;
  args: string[];
  options: Record<string, string | string[] | boolean>;
}

const usageLine = (c: CommandSpec): string => {
  const opts = Object.entries(c.options).map(([n, k]) => (k === 'flag' ? `[--${n}]` : `[--${n} ${n.toUpperCase()}]${k === 'list' ? '…' : ''}`));
  return ['edgestr', ...c.words, ...c.args, ...opts].join(' ');
};

export function helpText(spec?: CommandSpec): string {
  const global = 'Global options: --url <deployment> (default $EDGESTR_URL or http://127.0.0.1:8787), --key <file> (default $EDGESTR_KEY or ~/.config/edgestr/key), --json, --help';
  const exits = 'Exit status: 0 answered, 2 bad usage, 3 the agent answered with an error, 4 timed out, 5 could not connect or authenticate.';
  if (spec) return `usage: ${usageLine(spec)}\n\n${spec.summary}\n\n${global}\n${exits}\n`;
  const rows = COMMANDS.map((c) => `  ${[...c.words, ...c.args].join(' ').padEnd(34)} ${c.summary}`);
  return `usage: edgestr <command> [options]\n\nCommands:\n${rows.join('\n')}\n\n<agent> is a 64-hex key, an npub, or demo.\n${global}\n${exits}\n`;
}

/** Parses argv (without node and the script). `--help` anywhere asks for help with what was named. */
export function parseArgs(argv: string[]): Result<Parsed, string> {
  const words: string[] = [];
  const options: Record<string, string | string[] | boolean> = {};
  const rest: string[] = [];
  let spec: CommandSpec | undefined;
  const known = (): Record<string, OptionKind> => ({ ...GLOBAL, ...(spec?.options ?? {}) });
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '-h') {
      options.help = true;
      continue;
    }
    if (a.startsWith('--') && a.length > 2) {
      const eq = a.indexOf('=');
      const name = a.slice(2, eq > 0 ? eq : undefined);
      const kind = known()[name];
      if (!kind) return err(`unknown option --${name}${spec ? ` for ${spec.words.join(' ')}` : ''}`);
      if (kind === 'flag') {
        if (eq > 0) return err(`--${name} takes no value`);
        options[name] = true;
        continue;
      }
      const value = eq > 0 ? a.slice(eq + 1) : argv[++i];
      if (value === undefined) return err(`--${name} needs a value`);
      if (kind === 'list') options[name] = [...((options[name] as string[] | undefined) ?? []), value];
      else options[name] = value;
      continue;
    }
    if (!spec) {
      words.push(a);
      spec = COMMANDS.find((c) => c.words.join(' ') === words.join(' '));
      if (!spec && !COMMANDS.some((c) => c.words.slice(0, words.length).join(' ') === words.join(' '))) {
        if (options.help) break;
        return err(`unknown command: ${words.join(' ')}`);
      }
      continue;
    }
    rest.push(a);
  }
  if (options.help) return ok({ spec, args: rest, options });
  if (!spec) return err(words.length ? `${words.join(' ')} needs a subcommand` : 'no command given');
  const required = spec.args.filter((a) => a.startsWith('<')).length;
  const variadic = spec.args.some((a) => a.endsWith('…'));
  if (rest.length < required) return err(`${spec.words.join(' ')} needs ${spec.args.filter((a) => a.startsWith('<')).join(' ')}`);
  if (!variadic && rest.length > spec.args.length) return err(`too many arguments for ${spec.words.join(' ')}: ${rest.slice(spec.args.length).join(' ')}`);
  return ok({ spec, args: rest, options });
}

/** A positive number of seconds from an option value, in ms. */
export function secondsOption(value: unknown, name: string): Result<number | undefined, string> {
  if (value === undefined) return ok(undefined);
  const n = Number(value);
  return Number.isFinite(n) && n > 0 ? ok(Math.round(n * 1000)) : err(`--${name} must be a positive number of seconds`);
}

/** `k=v` arguments as an object; a value that parses as JSON (numbers, true, {…}) is taken as such. */
export function keyValues(pairs: string[]): Result<Record<string, unknown>, string> {
  const out: Record<string, unknown> = {};
  for (const p of pairs) {
    const eq = p.indexOf('=');
    if (eq <= 0) return err(`not a k=v argument: ${p}`);
    const v = p.slice(eq + 1);
    let value: unknown = v;
    try {
      value = JSON.parse(v) as unknown;
    } catch {
      // not JSON: the value is the plain string
    }
    out[p.slice(0, eq)] = value;
  }
  return ok(out);
}
