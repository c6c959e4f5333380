import { chmodSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { nsecEncode } from 'nostr-tools/nip19';
import { describe, expect, it } from 'vitest';
import { newKeyPair, readKeyFile, writeKeyFile } from './keys.js';

const dir = (): string => mkdtempSync(join(tmpdir(), 'edgestr-keys-'));

/** A key file left readable by everyone (mode 0644, whatever the umask). */
function worldReadable(path: string, text: string): void {
  writeFileSync(path, text, { mode: 0o644 });
  chmodSync(path, 0o644);
}

describe('writeKeyFile', () => {
  it('a new file has mode 0600', async () => {
    const path = join(dir(), 'sub', 'key');
    const key = newKeyPair();
    expect(await writeKeyFile(path, key)).toEqual({ ok: true, value: true });
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readFileSync(path, 'utf8')).toBe(`${nsecEncode(key.sk)}\n`);
  });

  it('force over an existing 0644 file: the new key with mode 0600, no temporary file left', async () => {
    const d = dir();
    const path = join(d, 'key');
    worldReadable(path, `${nsecEncode(newKeyPair().sk)}\n`);
    const key = newKeyPair();
    expect(await writeKeyFile(path, key, true)).toEqual({ ok: true, value: true });
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readFileSync(path, 'utf8')).toBe(`${nsecEncode(key.sk)}\n`);
    expect(readdirSync(d)).toEqual(['key']);
  });

  it('without force an existing file is kept as it was', async () => {
    const path = join(dir(), 'key');
    const old = `${nsecEncode(newKeyPair().sk)}\n`;
    worldReadable(path, old);
    const r = await writeKeyFile(path, newKeyPair());
    expect(r).toEqual({ ok: false, error: `${path} already exists (use --force to replace it)` });
    expect(readFileSync(path, 'utf8')).toBe(old);
  });
});

describe('readKeyFile', () => {
  it('warns when others may read or write the file, and still reads it', async () => {
    const path = join(dir(), 'key');
    const key = newKeyPair();
    worldReadable(path, `${nsecEncode(key.sk)}\n`);
    const warnings: string[] = [];
    const r = await readKeyFile(path, { warn: (m) => warnings.push(m) });
    expect(r.ok && r.value.pk).toBe(key.pk);
    expect(warnings).toEqual([`warning: ${path} is accessible to others (mode 0644): anyone who reads it can sign as you; run chmod 600 ${path}`]);
    chmodSync(path, 0o620);
    warnings.length = 0;
    await readKeyFile(path, { warn: (m) => warnings.push(m) });
    expect(warnings).toEqual([`warning: ${path} is accessible to others (mode 0620): anyone who reads it can sign as you; run chmod 600 ${path}`]);
  });

  it('no warning for 0600 or 0400; a path with spaces is quoted in the advice', async () => {
    const d = dir();
    const path = join(d, 'my key');
    writeFileSync(path, `${nsecEncode(newKeyPair().sk)}\n`, { mode: 0o600 });
    const warnings: string[] = [];
    await readKeyFile(path, { warn: (m) => warnings.push(m) });
    chmodSync(path, 0o400);
    await readKeyFile(path, { warn: (m) => warnings.push(m) });
    expect(warnings).toEqual([]);
    chmodSync(path, 0o640);
    await readKeyFile(path, { warn: (m) => warnings.push(m) });
    expect(warnings).toEqual([`warning: ${path} is accessible to others (mode 0640): anyone who reads it can sign as you; run chmod 600 '${path}'`]);
  });
});
