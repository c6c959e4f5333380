// The relay's Schnorr verifier: libsecp256k1 in Wasm, instantiated once per isolate from the
// module wrangler compiles at deploy time (Workers may not compile Wasm from bytes at run time).

// A relative path: wrangler's bundler applies its CompiledWasm rule to it (a bare alias is not matched).
import secp256k1 from '../../node_modules/nostr-wasm/public/out/secp256k1.wasm';
import { createWasmVerifier } from '../../src/shared/secp256k1-wasm.js';
import type { SchnorrSigner, SchnorrVerifier } from '../../src/shared/verify.js';

let instance: Promise<SchnorrVerifier & SchnorrSigner> | undefined;

export const relayVerifier = (): Promise<SchnorrVerifier & SchnorrSigner> => (instance ??= createWasmVerifier(secp256k1));
