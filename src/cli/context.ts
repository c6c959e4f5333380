// What every command of the `edgestr` command line shares: the exit codes, the deployment URL and
// key from options and environment, output (text, or one JSON object per line with --json), and
// failures carried as values up to main(), which prints them and exits with their code. The
// deployment URL is checked once, when a command first needs it (http(s) or ws(s) with a host, the
// client's deploymentUrl): anything else is bad usage, before anything is sent.
import { defaultKeyPath, keyPair, newKeyPair, parseSecretKey, readKeyFile, type KeyPair } from '../client/keys.js';
import { deploymentUrl, NOT_A_DEPLOYMENT_URL, type HttpError } from '../client/http.js';
import { toNpub } from '../shared/keys.js';
import { terminalJson, terminalSafe } from './terminal-safe.js';

export const EXIT = { OK: 0, USAGE: 2, AGENT_ERROR: 3, TIMEOUT: 4, CONNECT: 5 } as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** A failure that ends the command: the message for stderr and the exit code. */
export class Failure {
  constructor(
    readonly code: ExitCode,
    readonly message: string,
  ) {}
}

export interface Io {
  stdin: NodeJS.ReadableStream & { isTTY?: boolean };
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
}

export class Context {
  #url: string | undefined;

  constructor(
    readonly io: Io,
    readonly options: Record<string, string | string[] | boolean>,
  ) {}

  get json(): boolean {
    return this.options.json === true;
  }

  /**
   * The deployment: --url, else $EDGESTR_URL, else http://127.0.0.1:8787, without a trailing slash;
   * one that is not a deployment URL is a Failure (exit 2) naming where it came from.
   */
  get url(): string {
    if (this.#url !== undefined) return this.#url;
    const option = this.options.url as string | undefined;
    const env = this.io.env.EDGESTR_URL;
    const raw = option ?? env ?? 'http://127.0.0.1:8787';
    const url = deploymentUrl(raw);
    if (!url) throw new Failure(EXIT.USAGE, `${option !== undefined ? '--url' : 'EDGESTR_URL'} ${raw} ${NOT_A_DEPLOYMENT_URL}`);
    this.#url = url.href.replace(/\/+$/, '');
    return this.#url;
  }

  /** Where the key file is (for keygen, and the messages about it). */
  get keyPath(): string {
    return (this.options.key as string | undefined) ?? defaultKeyPath();
  }

  string(name: string): string | undefined {
    const v = this.options[name];
    return typeof v === 'string' ? v : undefined;
  }

  list(name: string): string[] {
    const v = this.options[name];
    return Array.isArray(v) ? v : [];
  }

  /** Text on stdout, control characters shown escaped (terminal-safe.ts: much of it comes from others). */
  out(text: string): void {
    this.io.stdout.write(terminalSafe(text));
  }

  /** Text on stderr, control characters shown escaped. */
  err(text: string): void {
    this.io.stderr.write(terminalSafe(text));
  }

  /**
   * Text output, or the object as one JSON line with --json (C1 and U+2028/2029 escaped too; an
   * object nested past what terminalJson prints is a Failure, jsonLine).
   */
  emit(obj: unknown, text: string): void {
    if (this.json) this.io.stdout.write(`${jsonLine(obj)}\n`);
    else this.out(text.endsWith('\n') || text === '' ? text : `${text}\n`);
  }

  /** The key in use: --key file, else $EDGESTR_KEY (nsec or hex), else ~/.config/edgestr/key. */
  async key(): Promise<KeyPair> {
    const found = await this.#findKey();
    if (found) return found;
    throw new Failure(EXIT.CONNECT, `no key: ${this.keyPath} does not exist (run edgestr keygen, or pass --key FILE or EDGESTR_KEY)`);
  }

  /** The key in use, or a fresh one for this session (said on stderr) when there is no key file. */
  async keyOrFresh(): Promise<KeyPair> {
    const found = await this.#findKey();
    if (found) return found;
    const fresh = newKeyPair();
    this.err(`edgestr: no key file at ${this.keyPath}; using a fresh key for this session (${toNpub(fresh.pk)})\n`);
    return fresh;
  }

  async #findKey(): Promise<KeyPair | undefined> {
    const explicit = this.options.key as string | undefined;
    const envKey = this.io.env.EDGESTR_KEY;
    if (!explicit && envKey) {
      const parsed = parseSecretKey(envKey);
      if (!parsed.ok) throw new Failure(EXIT.USAGE, `EDGESTR_KEY: ${parsed.error}`);
      return keyPair(parsed.value);
    }
    const r = await readKeyFile(this.keyPath, { warn: (m) => this.err(`edgestr: ${m}\n`) }); // a warning only: the exit status is the command's
    if (r.ok) return r.value;
    if (r.error.missing && !explicit) return undefined;
    throw new Failure(r.error.missing ? EXIT.CONNECT : EXIT.USAGE, r.error.message);
  }
}

/** terminalJson's text of `value`, or its refusal (a value nested too deep) as a Failure: exit 5, an answer past a limit. */
export function jsonLine(value: unknown, space?: number): string {
  const line = terminalJson(value, space);
  if (!line.ok) throw new Failure(EXIT.CONNECT, line.error);
  return line.value;
}

/** The failure for an HTTP error of the deployment: unreachable and refused auth → 5, bad input → 2. */
export function httpFailure(e: HttpError, what: string): Failure {
  if (e.status === 0) return new Failure(EXIT.CONNECT, e.message);
  if (e.status === 401) return new Failure(EXIT.CONNECT, `authentication refused (${what}): ${e.message}`);
  if (e.status === 403) return new Failure(EXIT.CONNECT, `not allowed (${what}): ${e.message}`);
  if (e.status === 404) return new Failure(EXIT.CONNECT, `${what}: ${e.message}`);
  if (e.status === 400 || e.status === 409 || e.status === 422) return new Failure(EXIT.USAGE, `${what}: ${e.message}`);
  return new Failure(EXIT.CONNECT, `${what}: HTTP ${e.status}: ${e.message}`);
}
