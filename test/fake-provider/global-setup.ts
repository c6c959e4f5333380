// vitest globalSetup (runs in Node, outside workerd): starts the fake LLM provider once per run
// and provides its URL to the tests, which read it with inject('fakeProviderUrl') — from inside
// workerd too, where fetch('http://127.0.0.1:<port>/…') reaches this process; and the flooding
// relay an agent may add as an extra relay (inject('floodRelayUrl'), ./flood-relay.ts).

import type { TestProject } from 'vitest/node';
import { startFakeProvider } from './server.js';
import { startFloodRelay } from './flood-relay.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** http://127.0.0.1:PORT — the fake provider (OpenAI base `${url}/v1`, Anthropic base `${url}`). */
    fakeProviderUrl: string;
    /** ws://127.0.0.1:PORT — a relay that floods REQs for 25802 with prompts from fresh keys (flood-relay.ts). */
    floodRelayUrl: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const fake = await startFakeProvider();
  project.provide('fakeProviderUrl', fake.url);
  const relay = await startFloodRelay();
  project.provide('floodRelayUrl', relay.url);
  return async () => {
    await fake.close();
    await relay.close();
  };
}
