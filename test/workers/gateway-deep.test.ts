// /mcp against a stranger's announcement that nests deeper than Node's JSON.stringify can write: a
// tool whose inputSchema holds 6,000 nested `[` (12 KB, under every size bound). The gateway in
// workerd did list it (also at 30,000 levels), passing it on to every MCP client that lists tools;
// discovery now leaves it out (src/shared/json-depth.ts MAX_JSON_DEPTH) and keeps the server's
// other tools. Its own file: the gateway caches the catalog per isolate.
import { describe, expect, it } from 'vitest';
import { connect, keys, sign } from './helpers.js';
import { allToolNames, gatewayClient } from './mcp-gateway-helpers.js';

describe('/mcp and an announcement nested 6,000 levels deep', () => {
  it('tools/list leaves the deep tool out; the same server’s other tool is listed', async () => {
    const stranger = keys();
    const nest = `${'['.repeat(6000)}${']'.repeat(6000)}`;
    const s = await connect('/');
    const server = { kind: 31316, tags: [['d', 'nest']], content: JSON.stringify({ capabilities: { tools: {} } }) };
    const tools = { kind: 31317, tags: [['d', 'nest/tools/list'], ['s', 'nest']], content: `{"tools":[{"name":"deep","inputSchema":{"type":"object","default":${nest}}},{"name":"flat","inputSchema":{"type":"object"}}]}` };
    for (const t of [server, tools]) expect((await s.publish(sign(stranger, t))).slice(2)).toEqual([true, '']);
    s.close();
    const client = await gatewayClient('gateway-deep');
    try {
      const names = await allToolNames(client);
      expect(names).toContain('nest__flat');
      expect(names.filter((n) => n.endsWith('__deep'))).toEqual([]);
    } finally {
      await client.close();
    }
  });
});
