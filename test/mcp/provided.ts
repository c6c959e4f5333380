// The values test/mcp/global-setup.ts provides to the in-runtime tool tests (inject('...')).
// Shared by the Node side (tsconfig.node.json) and the workerd side (tsconfig.json) as types only.

declare module 'vitest' {
  export interface ProvidedContext {
    /** http://127.0.0.1:PORT — the fixture HTTP server of test/mcp/global-setup.ts. */
    toolsFixtureUrl: string;
    /** http://127.0.0.1:PORT/mcp — the real @modelcontextprotocol/server-everything (Streamable HTTP). */
    mcpEverythingUrl: string;
    /** http://127.0.0.1:PORT/sse — a second server-everything in the legacy HTTP+SSE mode. */
    mcpEverythingSseUrl: string;
  }
}

export {};
