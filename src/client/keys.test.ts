import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
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

  it('force over a symlink replaces the file it points to (0600, in its own directory) and keeps the link', async () => {
    const secrets = dir();
    const target = join(secrets, 'edgestr.key');
    worldReadable(target, `${nsecEncode(newKeyPair().sk)}\n`);
    const config = dir();
    const link = join(config, 'key');
    symlinkSync(target, link);
    const key = newKeyPair();
    expect(await writeKeyFile(link, key, true)).toEqual({ ok: true, value: true });
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readlinkSync(link)).toBe(target);
    expect(readFileSync(target, 'utf8')).toBe(`${nsecEncode(key.sk)}\n`);
    expect(statSync(target).mode & 0o777).toBe(0o600);
    expect(readdirSync(secrets)).toEqual(['edgestr.key']);
    expect(readdirSync(config)).toEqual(['key']);
  });

  it('force over a symlink to nothing is refused, naming the missing file; without force any link is kept', async () => {
    const d = dir();
    const link = join(d, 'key');
    const missing = join(d, 'gone', 'key');
    symlinkSync(missing, link);
    expect(await writeKeyFile(link, newKeyPair(), true)).toEqual({ ok: false, error: `cannot write ${link}: it is a symbolic link to ${missing}, which does not exist` });
    expect(await writeKeyFile(link, newKeyPair())).toEqual({ ok: false, error: `${link} already exists (use --force to replace it)` });
    expect(readlinkSync(link)).toBe(missing);
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

  it('warns when others may write the directory that holds it (they could replace the key), unless it is sticky', async () => {
    const d = dir();
    const path = join(d, 'key');
    writeFileSync(path, `${nsecEncode(newKeyPair().sk)}\n`, { mode: 0o600 });
    const warnings: string[] = [];
    chmodSync(d, 0o777);
    await readKeyFile(path, { warn: (m) => warnings.push(m) });
    expect(warnings).toEqual([`warning: ${d} (the directory of ${path}) is writable by others (mode 0777): they can replace your key with theirs; run chmod 700 ${d}`]);
    warnings.length = 0;
    chmodSync(d, 0o1777);
    await readKeyFile(path, { warn: (m) => warnings.push(m) });
    chmodSync(d, 0o755);
    await readKeyFile(path, { warn: (m) => warnings.push(m) });
    expect(warnings).toEqual([]);
    const group = join(d, 'shared');
    mkdirSync(group);
    chmodSync(group, 0o770);
    const inGroup = join(group, 'key');
    writeFileSync(inGroup, `${nsecEncode(newKeyPair().sk)}\n`, { mode: 0o600 });
    await readKeyFile(inGroup, { warn: (m) => warnings.push(m) });
    expect(warnings).toEqual([`warning: ${group} (the directory of ${inGroup}) is writable by others (mode 0770): they can replace your key with theirs; run chmod 700 ${group}`]);
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
