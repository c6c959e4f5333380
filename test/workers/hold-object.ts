// Test helper: hold a Durable Object's input gate (blockConcurrencyWhile) until the test fails it,
// as the platform does when an object resets; calls queued behind the gate fail with that error
// (holdObject), or until the test lets it go, when they are served in order (pauseObject).
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

/**
 * Holds `stub`'s input gate as holdObject does; the returned function lets it go without a reset,
 * so the calls queued meanwhile are then served, in the order they came.
 */
export async function pauseObject(stub: DurableObjectStub): Promise<() => Promise<void>> {
  let resume!: () => void;
  let blocked = false;
  const gate = new Promise<void>((r) => (resume = r));
  const held = runInDurableObject(stub, (_i, state) =>
    state.blockConcurrencyWhile(() => {
      blocked = true;
      return gate;
    }),
  );
  while (!blocked) await new Promise((r) => setTimeout(r, 10));
  return async () => {
    resume();
    await held;
  };
}
