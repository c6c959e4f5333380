// List the DVMCP tools announced on a deployment and call one (payments declined: maxSats 0).
//   EDGESTR_URL=… node examples/tools.mjs [server] [tool] [json-arguments]
import { callTool, findServer, listTools, newKeyPair } from 'edgestr/client';

const url = process.env.EDGESTR_URL ?? 'http://127.0.0.1:8787';
const [serverName, tool, args = '{}'] = process.argv.slice(2);

const catalog = await listTools(url);
if (!catalog.ok) throw new Error(catalog.error);
for (const s of catalog.value.servers) console.log(`${s.id}: ${s.tools.map((t) => t.name).join(', ')}`);

if (serverName && tool) {
  const server = findServer(catalog.value, serverName);
  if (!server) throw new Error(`no server ${serverName}`);
  const result = await callTool(url, newKeyPair(), server, tool, JSON.parse(args), {
    maxSats: 0,
    onProgress: (p) => console.error(`progress ${p.progress}/${p.total ?? '?'}`),
  });
  if (!result.ok) throw new Error(`${result.error.kind}: ${result.error.message}`);
  console.log(result.value.content.map((c) => c.text ?? '').join('\n'));
}
