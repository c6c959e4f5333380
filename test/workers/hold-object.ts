// Test helper: hold a Durable Object's input gate (blockConcurrencyWhile) until the test fails it,
// as the platform does when an object resets; calls queued behind the gate fail with that error.
import { runInDurableObject } from 'cloudflare:test';
import { expect } from 'vitest';

/**
 * Holds `stub`'s input gate; resolves once it is held (polled: a promise resolved inside the object
 * would run what follows in its context). The returned function fails the gate with `e` (a reset)
 * and checks the hold ended with it.
 */
export async function holdObject(stub: DurableObjectStub): Promise<(e: Error) => Promise<void>> {
  let reset!: (e: Error) => void;
  let blocked = false;
  const gate = new Promise<never>((_, reject) => (reset = reject));
  const held = runInDurableObject(stub, (_i, state) =>
    state.blockConcurrencyWhile(() => {
      blocked = true;
      return gate;
    }),
  );
  while (!blocked) await new Promise((r) => setTimeout(r, 10));
  return async (e) => {
    reset(e);
    await expect(held).rejects.toThrow(e.message);
  };
}
