// Unit tests of pure modules, in plain Node (no workerd): the *.test.ts files beside their source
// in src/, workers/ and bench/lib/, as nostr-tools keeps its tests. What needs a Durable Object, the Worker or
// the Wasm verifier runs in the workers pool (vitest.config.ts, test/workers).
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    environment: 'node',
    include: ['src/**/*.test.ts', 'workers/**/*.test.ts', 'bench/lib/*.test.mjs'],
  },
});
