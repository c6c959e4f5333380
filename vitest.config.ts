// In-runtime tests: run inside workerd with real Durable Objects, SQLite storage and WebSockets.
// `workersProject` is also the base of vitest.edges.config.ts (the relay tests again, with every
// shard split into edge objects).
import { cloudflareTest } from '@cloudflare/vitest-pool-workers';
import { defineConfig } from 'vitest/config';
import { TEST_ADMIN, TEST_OWNER, TEST_PLANS } from './test/workers/test-keys.js';
import { dropBrokenSourcemaps } from './test/support/drop-broken-sourcemaps.js';


/** The workers test project: `bindings` added to (or replacing) the ones below, `include` the test files. */
export function workersProject(bindings: Record<string, string> = {}, include = ['test/workers/**/*.test.ts']) {
  return defineConfig({
    plugins: [
      dropBrokenSourcemaps(),
      cloudflareTest(({ inject }) => ({
        wrangler: { configPath: './wrangler.toml' },
        miniflare: {
          // TEST_OWNER may own agents; EDGESTR_SECRET seals agent keys (a test value, not a secret).
          // Both provider APIs point at the fake provider (test/fake-provider), started by globalSetup.
          // EDGESTR_OPEN_SHARDS: tests use random owners' shards everywhere (the closed behaviour is
          // tested with the variable removed, test/workers/router-trust.test.ts).
          bindings: {
            EDGESTR_OWNERS: TEST_OWNER,
            // The operator of test/workers/saas-*.test.ts, and its plans (workers/accounts/plans.ts).
            EDGESTR_ADMINS: TEST_ADMIN,
            EDGESTR_PLANS: TEST_PLANS,
            EDGESTR_ENV: 'test',
            EDGESTR_OPEN_SHARDS: 'true',
            // The fake provider, the MCP server and the fixture server listen on 127.0.0.1: the
            // operator's explicit outbound exception (src/shared/outbound-url.ts) lets agents reach
            // them (on every port: their ports are chosen at start), as a deployment would list an internal
            // MCP server. Nothing else local is allowed.
            EDGESTR_OUTBOUND_ALLOW: '127.0.0.1:*',
            EDGESTR_SECRET: 'edgestr-test-secret-0123456789',
            // Unpaid priced calls expire after 5 s (workers/bridge/payments.ts), so expiry is testable.
            EDGESTR_PAYMENT_EXPIRY: '5',
            OPENAI_BASE_URL: `${inject('fakeProviderUrl')}/v1`,
            OPENAI_API_KEY: 'sk-test-fake',
            ANTHROPIC_BASE_URL: inject('fakeProviderUrl'),
            ANTHROPIC_API_KEY: 'sk-ant-test-fake',
            ...bindings,
          },
        },
      })),
    ],
    test: {
      include,
      // Two cores run many workerd test files at once: allow for slow moments under that load.
      testTimeout: 20_000,
      // The Workers' logs (e.g. the agents' JSON lines, docs/OPERATIONS.md "Logs") are shown for failing tests only.
      silent: 'passed-only',
      // Local servers at the network boundary (Node side): the fake LLM provider, and the real
      // MCP server-everything plus a small HTTP fixture server for web_fetch; the LNURL-pay server of
      // the payment tests.
      globalSetup: ['test/fake-provider/global-setup.ts', 'test/mcp/global-setup.ts', 'test/lnurl/global-setup.ts'],
    },
  });
}

export default workersProject();
