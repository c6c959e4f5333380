// Schnorr verifier interface plus the pure-JS (noble) implementation. The relay uses the Wasm
// verifier (workers/common/secp256k1-wasm.ts) on its hot path; everything else may use either.

import { schnorr } from '@noble/curves/secp256k1.js';

export interface SchnorrVerifier {
  readonly name: string;
  /** BIP-340 verification of a 64-byte signature over a 32-byte message by an x-only key. */
  verify(signature: Uint8Array, message: Uint8Array, pubkey: Uint8Array): boolean;
  /** A faster SHA-256 from the same backend, used for event ids when present. */
  sha256?(data: Uint8Array): Uint8Array;
}

export const nobleVerifier: SchnorrVerifier = {
  name: '@noble/curves (pure JS)',
  verify(signature, message, pubkey) {
    try {
      return schnorr.verify(signature, message, pubkey);
    } catch {
      // noble throws on keys that are not on the curve; that is simply an invalid signature.
      return false;
    }
  },
};

export interface SchnorrSigner {
  /** BIP-340 signature (with fresh auxiliary randomness) over a 32-byte message; also returns the x-only pubkey. */
  sign(message: Uint8Array, secretKey: Uint8Array): { signature: Uint8Array; pubkey: Uint8Array };
  /** The x-only public key of a secret key (when the backend derives it faster than @noble/curves). */
  publicKey?(secretKey: Uint8Array): Uint8Array;
}
