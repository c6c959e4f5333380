// The relay's Schnorr verifier: libsecp256k1 in Wasm, instantiated once per isolate from the
// module wrangler compiles at deploy time (Workers may not compile Wasm from bytes at run time).
// A failed setup is not remembered: the next caller tries again. Relay shards set it up in their
// constructor (blockConcurrencyWhile), so their message handlers use it without awaiting.

import { createWasmVerifier } from './secp256k1-wasm.js';
import type { SchnorrSigner, SchnorrVerifier } from '../../src/shared/verify.js';

/** A shared async setup: call it to get (or start) the value; `ready` holds it once it succeeded. */
export interface Loader<T> {
  (): Promise<T>;
  readonly ready: T | undefined;
}

/**
 * Wraps an async setup so that concurrent callers share one attempt, a success is kept, and a
 * failure is forgotten (the rejection goes to the callers of that attempt; the next call retries).
 */
export function onceAtATime<T>(setup: () => Promise<T>): Loader<T> {
  let pending: Promise<T> | undefined;
  let ready: T | undefined;
  const load = () =>
    (pending ??= setup().then(
      (value) => (ready = value),
      (e: unknown) => {
        pending = undefined;
        throw e;
      },
    ));
  return Object.defineProperty(load, 'ready', { get: () => ready }) as Loader<T>;
}

export const relayVerifier: Loader<SchnorrVerifier & SchnorrSigner> = onceAtATime(createWasmVerifier);
