// The nostr-wasm binding (workers/common/secp256k1-wasm.ts) is written for one build's minified
// names: these tests fail loudly, naming the expected exports, when the package or its build
// changes, and check that the version is pinned exactly.
import { describe, expect, it } from 'vitest';
import { generateSecretKey, getPublicKey, verifyEvent } from 'nostr-tools/pure';
import { backendSigner } from '../../src/shared/event.js';
import { bytesToHex } from '../../src/shared/hex.js';
import installed from '../../node_modules/nostr-wasm/package.json';
import project from '../../package.json';
import { bindingMismatch, createWasmVerifier, EXPECTED_EXPORTS, EXPECTED_IMPORTS, NOSTR_WASM_VERSION } from '../../workers/common/secp256k1-wasm.js';

// Descriptors of a build that matches, to change one thing at a time.
const realExports = (): WebAssembly.ModuleExportDescriptor[] =>
  Object.entries(EXPECTED_EXPORTS).map(([role, name]) => ({ name, kind: role === 'memory' ? 'memory' : 'function' }));
const realImports = (): WebAssembly.ModuleImportDescriptor[] => EXPECTED_IMPORTS.map((name) => ({ module: 'a', name, kind: 'function' }));

describe('the nostr-wasm binding', () => {
  it(`is pinned to exactly nostr-wasm ${NOSTR_WASM_VERSION}, the version installed`, () => {
    expect(project.dependencies['nostr-wasm'], 'package.json must pin nostr-wasm exactly (no ^ or ~)').toBe(NOSTR_WASM_VERSION);
    expect(installed.version, 'the installed nostr-wasm is not the one the binding was written for').toBe(NOSTR_WASM_VERSION);
  });

  it('the bundled secp256k1.wasm has the exports and imports the binding uses', async () => {
    const mismatch = bindingMismatch();
    if (mismatch) expect.fail(mismatch);
    const v = await createWasmVerifier();
    expect(v.name).toBe('libsecp256k1 (wasm)');
  });

  it('another build is refused with a message naming what the binding expects', () => {
    expect(bindingMismatch(realExports(), realImports())).toBeUndefined();
    const renamed = realExports().map((e) => (e.name === EXPECTED_EXPORTS.schnorrsigVerify ? { ...e, name: 'v' } : e));
    const message = bindingMismatch(renamed, realImports());
    expect(message).toContain('export "u" (schnorrsigVerify) should be a function, is missing');
    expect(message).toContain(`not the nostr-wasm ${NOSTR_WASM_VERSION} build`);
    expect(message).toContain('Expected exports: g=memory, h=init, i=malloc');
    const noMemory = realExports().map((e) => (e.name === EXPECTED_EXPORTS.memory ? { ...e, kind: 'table' as const } : e));
    expect(bindingMismatch(noMemory, realImports())).toContain('export "g" (memory) should be a memory, is table');
    expect(bindingMismatch(realExports(), [...realImports(), { module: 'env', name: 'emscripten_resize', kind: 'function' }])).toContain(
      'unexpected import "env.emscripten_resize" (function)',
    );
  });

  it('derives public keys as @noble/curves does, and signs events that verify (backendSigner)', async () => {
    const wasm = await createWasmVerifier();
    for (let i = 0; i < 8; i++) {
      const sk = generateSecretKey();
      expect(bytesToHex(wasm.publicKey!(sk))).toBe(getPublicKey(sk));
      const e = backendSigner(wasm)({ kind: 1, created_at: 1_700_000_000 + i, tags: [], content: `n${i}` }, sk);
      expect(e.pubkey).toBe(getPublicKey(sk));
      expect(verifyEvent(e)).toBe(true);
    }
    expect(() => wasm.publicKey!(new Uint8Array(32))).toThrow('publicKey: invalid secret key');
    expect(() => wasm.publicKey!(new Uint8Array(31))).toThrow('publicKey: a 32-byte secret key is required');
  });
});
