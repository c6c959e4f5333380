// `edgestr keygen --force` and reading the key file, through main(): a replaced key file is 0600
// whatever the old one's mode was, and a key file others may read gets a warning (exit status unchanged).
import { chmodSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nsecEncode } from 'nostr-tools/nip19';
import { generateSecretKey } from 'nostr-tools/pure';
import { describe, expect, it } from 'vitest';
import { parseSecretKey, keyPair } from '../client/keys.js';
import { toNpub } from '../shared/keys.js';
import { runCli } from '../../test/helpers-node/run-cli.js';

const run = (argv: string[]) => runCli(argv);

/** A key file holding a fresh key, left at mode 0644. */
function worldReadableKey(): { path: string; npub: string } {
  const sk = generateSecretKey();
  const path = join(mkdtempSync(join(tmpdir(), 'edgestr-cli-key-')), 'key');
  writeFileSync(path, `${nsecEncode(sk)}\n`, { mode: 0o644 });
  chmodSync(path, 0o644);
  return { path, npub: toNpub(keyPair(sk).pk) };
}

describe('key file permissions', () => {
  it('keygen --force over a 0644 key file leaves the new key with mode 0600', async () => {
    const { path, npub: old } = worldReadableKey();
    const r = await run(['keygen', '--force', '--key', path]);
    expect(r.code).toBe(0);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    const written = parseSecretKey(readFileSync(path, 'utf8').split('\n')[0]!);
    expect(written.ok).toBe(true);
    const npub = written.ok ? toNpub(keyPair(written.value).pk) : '';
    expect(r.stdout).toBe(`${npub}\n`);
    expect(npub).not.toBe(old);
  });

  it('whoami with a 0644 key file warns on stderr with the chmod to run, and exits 0', async () => {
    const { path, npub } = worldReadableKey();
    const r = await run(['whoami', '--key', path]);
    expect(r.code).toBe(0);
    expect(r.stdout.split('\n')[0]).toBe(npub);
    expect(r.stderr).toBe(`edgestr: warning: ${path} is accessible to others (mode 0644): anyone who reads it can sign as you; run chmod 600 ${path}\n`);
    chmodSync(path, 0o600);
    expect(await run(['whoami', '--key', path])).toMatchObject({ code: 0, stderr: '' });
  });
});
