// The official MCP SDK client against this deployment's /mcp gateway (SELF), for the tests that read
// what the gateway lists: a connected client, and every tool name over all pages of tools/list.
import { SELF } from 'cloudflare:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CfWorkerJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/cfworker';

/** An MCP client connected to http://relay.test/mcp (close it when done). */
export async function gatewayClient(name: string): Promise<Client> {
  const client = new Client({ name, version: '1.0.0' }, { jsonSchemaValidator: new CfWorkerJsonSchemaValidator() });
  await client.connect(new StreamableHTTPClientTransport(new URL('http://relay.test/mcp'), { fetch: (u, init) => SELF.fetch(u, init) }));
  return client;
}

/** The names of every tool `client` is offered, page after page. */
export async function allToolNames(client: Client): Promise<string[]> {
  const names: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor });
    names.push(...page.tools.map((t) => t.name));
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  return names;
}
