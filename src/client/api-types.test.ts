// The client's input types against the server's zod schemas, at the type level (checked by `npm run
// typecheck`, tsconfig.node.json; at run time these tests pass trivially). api.ts cannot import
// them: the library's declarations are built with rootDir src (tsconfig.client.json), so a module
// of workers/ in its import graph, even a type, fails that build. workers/bridge/config.ts has no
// Worker-only imports, so this test can hold BridgeServerInput equal to what POST
// /api/bridge/servers takes. (workers/agent/config.ts reaches the agent's tools and Durable
// Object types, which plain Node's typecheck does not have: AgentInput is kept by hand.)
import { describe, expectTypeOf, it } from 'vitest';
import type { CreateServer } from '../../workers/bridge/config.js';
import type { BridgeServerInput } from './api.js';

describe('input types of the management API', () => {
  it('BridgeServerInput is what POST /api/bridge/servers takes (encryption a boolean, picture and website; before: encryption a string, neither)', () => {
    expectTypeOf<BridgeServerInput>().toEqualTypeOf<CreateServer>();
  });
});
