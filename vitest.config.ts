// In-runtime tests: run inside workerd with real Durable Objects, SQLite storage and WebSockets.
import { cloudflareTest } from '@cloudflare/vitest-pool-workers';
import { defineConfig } from 'vitest/config';
import { fileURLToPath } from 'node:url';

// Same alias as wrangler.toml's [alias]: the Wasm build of libsecp256k1 shipped by nostr-wasm.
const secp256k1Wasm = fileURLToPath(new URL('./node_modules/nostr-wasm/public/out/secp256k1.wasm', import.meta.url));

export default defineConfig({
  plugins: [
    cloudflareTest({
      wrangler: { configPath: './wrangler.toml' },
      miniflare: {
        bindings: { EDGESTR_OWNERS: '', EDGESTR_ENV: 'test' },
      },
    }),
  ],
  resolve: { alias: { 'secp256k1.wasm': secp256k1Wasm } },
  test: {
    include: ['test/workers/**/*.test.ts'],
  },
});
