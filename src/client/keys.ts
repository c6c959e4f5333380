// Secret keys for the client: read from a key file or a string (nsec or 64-hex), made new, and
// written with mode 0600. The default location is ~/.config/edgestr/key.
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
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

/** The key in the first line of `path`; `missing` when the file does not exist. */
export async function readKeyFile(path: string): Promise<Result<KeyPair, { missing: boolean; message: string }>> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    const missing = (e as NodeJS.ErrnoException).code === 'ENOENT';
    return err({ missing, message: missing ? `no key file at ${path}` : `cannot read ${path}: ${(e as Error).message}` });
  }
  const parsed = parseSecretKey(text.split('\n')[0] ?? '');
  return parsed.ok ? ok(keyPair(parsed.value)) : err({ missing: false, message: `${path}: ${parsed.error}` });
}

/** Writes the key as an nsec line with mode 0600 (creating the directory); refuses to overwrite unless `force`. */
export async function writeKeyFile(path: string, key: KeyPair, force = false): Promise<Result<true, string>> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  try {
    await writeFile(path, `${nsecEncode(key.sk)}\n`, { mode: 0o600, flag: force ? 'w' : 'wx' });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return err(`${path} already exists (use --force to replace it)`);
    return err(`cannot write ${path}: ${(e as Error).message}`);
  }
  return ok(true);
}

export const describeKey = (key: KeyPair): { npub: string; hex: string } => ({ npub: toNpub(key.pk), hex: key.pk });
export const secretHex = (key: KeyPair): string => bytesToHex(key.sk);
