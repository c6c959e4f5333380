// The relay tests again with every shard split into K = 4 edge objects (RELAY_EDGES, see
// docs/SCALING.md): each connection lands on one of four edges of its shard, and the write path,
// history and ordering stay with the shard's primary. The same files as the K = 1 project, so both
// must pass unchanged in what they assert. The hosted-agent, payments, sessions, bridge, /mcp gateway
// and DVMCP client files run too (their relay links go through the edges like any client's), and
// the NIP-AO library's against a live relay.
import { workersProject } from './vitest.config.js';

export default workersProject({ RELAY_EDGES: JSON.stringify({ '*': 4 }) }, [
  'test/workers/relay-*.test.ts',
  'test/workers/store*.test.ts',
  'test/workers/fuzz-relay.test.ts',
  'test/workers/ao-relay.test.ts',
  'test/workers/ao-library.test.ts',
  'test/workers/authz-matrix.test.ts',
  'test/workers/agent-*.test.ts',
  'test/workers/payments-*.test.ts',
  'test/workers/sessions.test.ts',
  'test/workers/bridge-*.test.ts',
  'test/workers/gateway.test.ts',
  'test/workers/gateway-trust.test.ts',
  'test/workers/dvmcp-client*.test.ts',
]);
