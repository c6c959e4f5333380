import { describe, expect, it } from 'vitest';
import secp256k1 from '../../node_modules/nostr-wasm/public/out/secp256k1.wasm';
import { createWasmVerifier } from '../../src/shared/secp256k1-wasm.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import { finalizeEvent, generateSecretKey } from 'nostr-tools/pure';
import { checkIdAndSignature, parseEvent } from '../../src/shared/event.js';

describe('verifiers', () => {
  it('wasm and noble agree', async () => {
    const wasm = await createWasmVerifier(secp256k1);
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
