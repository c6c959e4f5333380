// The secret HTTP headers an owner gives for a remote MCP server (a bridge server's, an agent's
// `mcp_servers`): one schema for both, so both refuse the same things with the same words. Names
// are HTTP tokens (at most 64 characters, at most 16 headers); names the MCP client sets itself or
// the transport owns are refused (an owner's `Mcp-Session-Id` or `Content-Length` would break the
// session or the request); values are one line (no CR/LF: no header injection), at most 4096
// characters; a name "__proto__" is refused rather than silently dropped (proto-key.ts).

import { z } from 'zod';
import { withoutProtoKey } from './proto-key.js';

/** Header names the MCP client sets itself (or the transport owns). */
const RESERVED_HEADERS = new Set([
  'host',
  'content-length',
  'content-type',
  'accept',
  'connection',
  'upgrade',
  'transfer-encoding',
  'mcp-session-id',
  'mcp-protocol-version',
  'last-event-id',
]);
const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$/;

/** The headers schema; `setter` names who sets the reserved ones in the refusal ("the bridge", "the agent"). */
export const mcpHeadersSchema = (setter: string) =>
  withoutProtoKey(
    z
      .record(z.string(), z.string().max(4096).regex(/^[^\r\n]*$/, 'header values are one line'))
      .superRefine((headers, ctx) => {
        const names = Object.keys(headers);
        if (names.length > 16) ctx.addIssue({ code: 'custom', message: 'at most 16 headers' });
        for (const name of names) {
          if (!HEADER_NAME.test(name)) ctx.addIssue({ code: 'custom', path: [name], message: 'not an HTTP header name' });
          else if (RESERVED_HEADERS.has(name.toLowerCase())) ctx.addIssue({ code: 'custom', path: [name], message: `${name} is set by ${setter}` });
        }
      }),
  );
