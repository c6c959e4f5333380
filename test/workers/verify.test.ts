import { describe, expect, it } from 'vitest';
import { createWasmVerifier } from '../../workers/common/secp256k1-wasm.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import { finalizeEvent, generateSecretKey } from 'nostr-tools/pure';
import { checkIdAndSignature, parseEvent } from '../../src/shared/event.js';

describe('verifiers', () => {
  it('wasm and noble agree', async () => {
    const wasm = await createWasmVerifier();
    const e = finalizeEvent({ kind: 1, created_at: 1, tags: [], content: 'hi' }, generateSecretKey());
    const p = parseEvent(e);
    expect(p.ok).toBe(true);
    if (!p.ok) return;
    expect(checkIdAndSignature(p.value, wasm).ok).toBe(true);
    expect(checkIdAndSignature(p.value, nobleVerifier).ok).toBe(true);
    const bad = { ...p.value, sig: p.value.sig.replace(/^./, (c) => (c === '0' ? '1' : '0')) };
    expect(checkIdAndSignature(bad, wasm)).toEqual({ ok: false, error: { prefix: 'invalid', reason: 'signature verification failed' } });
  });
});

describe('Wasm SHA-256 (event ids on the relay)', () => {
  it('equals noble for empty, small, chunk-boundary and large inputs', async () => {
    const { sha256 } = await import('@noble/hashes/sha2.js');
    const wasm = await createWasmVerifier();
    for (const n of [0, 1, 55, 64, 16_383, 16_384, 16_385, 100_000, 262_144]) {
      const data = new Uint8Array(n).map((_, i) => (i * 31 + n) & 0xff);
      expect(Buffer.from(wasm.sha256!(data)).toString('hex'), `length ${n}`).toBe(Buffer.from(sha256(data)).toString('hex'));
    }
  });

  it('gives the same ids and verdicts as noble through checkIdAndSignature', async () => {
    const wasm = await createWasmVerifier();
    const e = finalizeEvent({ kind: 1, created_at: 1, tags: [['t', 'ü✓']], content: 'x'.repeat(20_000) }, generateSecretKey());
    const p = parseEvent(e);
    if (!p.ok) throw new Error('shape');
    expect(checkIdAndSignature(p.value, wasm)).toEqual(checkIdAndSignature(p.value, nobleVerifier));
    const tampered = { ...p.value, content: p.value.content + 'y' };
    expect(checkIdAndSignature(tampered, wasm)).toEqual({ ok: false, error: { prefix: 'invalid', reason: 'event id does not match the event hash' } });
  });
});
