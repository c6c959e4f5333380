// Secret keys for the client: read from a key file or a string (nsec or 64-hex), made new, and
// written with mode 0600. The default location is ~/.config/edgestr/key. A key file others may read,
// or in a directory others may write, is read with a warning (like ssh's StrictModes), and a
// replaced one is written anew (a file of its own, renamed over the old one), so that it never keeps
// the old file's mode; through a symbolic link, the file it points to is the one replaced.
import { randomBytes } from 'node:crypto';
import { lstat, mkdir, open, readlink, realpath, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { decode, nsecEncode } from 'nostr-tools/nip19';
import { generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { err, ok, type Result } from '../shared/errors.js';
import { bytesToHex, hexToBytes } from '../shared/hex.js';
import { toNpub } from '../shared/keys.js';

export interface KeyPair {
  sk: Uint8Array;
  pk: string;
}

export const defaultKeyPath = (): string => join(homedir(), '.config', 'edgestr', 'key');

export const keyPair = (sk: Uint8Array): KeyPair => ({ sk, pk: getPublicKey(sk) });

export const newKeyPair = (): KeyPair => keyPair(generateSecretKey());

/** The secret key named by `s`: an nsec or 64 hex characters (surrounding spaces ignored). */
export function parseSecretKey(s: string): Result<Uint8Array, string> {
  const t = s.trim();
  if (/^[0-9a-fA-F]{64}$/.test(t)) return ok(hexToBytes(t.toLowerCase()));
  if (t.startsWith('nsec1')) {
    try {
      const d = decode(t as `nsec1${string}`);
      if (d.type === 'nsec') return ok(d.data);
    } catch {
      // falls through to the error below: a malformed nsec is not a key
    }
  }
  return err('not a secret key (expected an nsec or 64 hex characters)');
}

/** `path` as one shell word, for advice the user may paste. */
const shellWord = (path: string): string => (/^[\w@%+=:,./~-]+$/.test(path) ? path : `'${path.replace(/'/g, `'\\''`)}'`);

/** The warning for a key file whose mode lets others read (or write) it; undefined when it does not. */
export function keyFileModeWarning(path: string, mode: number): string | undefined {
  if (process.platform === 'win32' || (mode & 0o077) === 0) return undefined;
  const octal = (mode & 0o777).toString(8).padStart(4, '0');
  return `warning: ${path} is accessible to others (mode ${octal}): anyone who reads it can sign as you; run chmod 600 ${shellWord(path)}`;
}

/**
 * The warning for a key file in a directory others may write (they could put their key in its
 * place); undefined when they may not, or when the directory is sticky (as /tmp: others cannot
 * rename or remove what is yours).
 */
export function keyDirModeWarning(path: string, dirMode: number): string | undefined {
  if (process.platform === 'win32' || (dirMode & 0o022) === 0 || (dirMode & 0o1000) !== 0) return undefined;
  const dir = dirname(path);
  const octal = (dirMode & 0o777).toString(8).padStart(4, '0');
  return `warning: ${dir} (the directory of ${path}) is writable by others (mode ${octal}): they can replace your key with theirs; run chmod 700 ${shellWord(dir)}`;
}

export interface ReadKeyOptions {
  /** Told when others may read the file (it is read all the same); default: a line on stderr. */
  warn?: (message: string) => void;
}

/** The key in the first line of `path`; `missing` when the file does not exist. */
export async function readKeyFile(path: string, opts: ReadKeyOptions = {}): Promise<Result<KeyPair, { missing: boolean; message: string }>> {
  let text: string;
  try {
    const file = await open(path, 'r');
    try {
      const warnings = [keyFileModeWarning(path, (await file.stat()).mode), keyDirModeWarning(path, (await stat(dirname(path))).mode)];
      for (const warning of warnings) if (warning) (opts.warn ?? ((m: string) => process.stderr.write(`${m}\n`)))(warning);
      text = await file.readFile('utf8');
    } finally {
      await file.close();
    }
  } catch (e) {
    const missing = (e as NodeJS.ErrnoException).code === 'ENOENT';
    return err({ missing, message: missing ? `no key file at ${path}` : `cannot read ${path}: ${(e as Error).message}` });
  }
  const parsed = parseSecretKey(text.split('\n')[0] ?? '');
  return parsed.ok ? ok(keyPair(parsed.value)) : err({ missing: false, message: `${path}: ${parsed.error}` });
}

/**
 * Writes the key as an nsec line with mode 0600 (creating the directory); refuses to overwrite unless
 * `force`. A new file is created 0600; with `force` the key goes to a new 0600 file in the same
 * directory, flushed, then renamed over `path` (atomic: `path` holds the old key or the new one,
 * never a world-readable or half-written new one; writing into the old file would keep its mode).
 * When `path` is a symbolic link, the file it points to is replaced so (the link stays).
 */
export async function writeKeyFile(path: string, key: KeyPair, force = false): Promise<Result<true, string>> {
  const text = `${nsecEncode(key.sk)}\n`;
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  if (!force) {
    try {
      await writeFile(path, text, { mode: 0o600, flag: 'wx' });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') return err(`${path} already exists (use --force to replace it)`);
      return err(`cannot write ${path}: ${(e as Error).message}`);
    }
    return ok(true);
  }
  const target = await replaced(path);
  if (!target.ok) return target;
  const destination = target.value;
  const temp = join(dirname(destination), `.${basename(destination)}.${randomBytes(6).toString('hex')}.tmp`);
  try {
    const file = await open(temp, 'wx', 0o600);
    try {
      await file.writeFile(text);
      await file.sync();
    } finally {
      await file.close();
    }
    await rename(temp, destination);
  } catch (e) {
    await unlink(temp).catch(() => undefined); // gone already, or never made
    return err(`cannot write ${path}: ${(e as Error).message}`);
  }
  return ok(true);
}

/** The file `--force` replaces at `path`: itself, or the file a symbolic link there points to (which must exist). */
async function replaced(path: string): Promise<Result<string, string>> {
  try {
    if (!(await lstat(path)).isSymbolicLink()) return ok(path);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return ok(path);
    return err(`cannot write ${path}: ${(e as Error).message}`);
  }
  try {
    return ok(await realpath(path));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') return err(`cannot write ${path}: ${(e as Error).message}`);
    return err(`cannot write ${path}: it is a symbolic link to ${resolve(dirname(path), await readlink(path))}, which does not exist`);
  }
}

export const describeKey = (key: KeyPair): { npub: string; hex: string } => ({ npub: toNpub(key.pk), hex: key.pk });
export const secretHex = (key: KeyPair): string => bytesToHex(key.sk);
