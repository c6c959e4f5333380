// End-to-end tests: plain Node talking to the real Worker under `wrangler dev` (local workerd),
// started once per run by test/e2e/global-setup.ts.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    environment: 'node',
    include: ['test/e2e/**/*.test.ts'],
    // The Worker under wrangler dev; the real MCP server-everything (for the DVMCP bridge behind /mcp).
    globalSetup: ['test/e2e/global-setup.ts', 'test/mcp/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // One wrangler dev serves every file; keep the load on it (and the one core) predictable.
    fileParallelism: false,
  },
});
