// Which DVMCP server `edgestr call` reaches, and what the user is shown before calling or paying:
// main() against a fake relay (test/helpers-node/fake-relay.ts) whose NIP-11 names this deployment's
// bridge (or none), serving the bridge's `weather` and a stranger's newer `zz` that calls itself
// weather (on the deployment, also 100 more servers of the stranger, newer than the bridge's). Each fake server signs its answers with its own key.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { finalizeEvent, generateSecretKey } from 'nostr-tools/pure';
import { fakeRelay, type FakeRelay } from '../../test/helpers-node/fake-relay.js';
import { runCli } from '../../test/helpers-node/run-cli.js';
import { ann, bridge, bridgePk, stranger, strangerPk, T } from '../../test/helpers-node/contested-servers.js';
import { listAnnouncement, LISTS } from '../shared/dvmcp.js';
import { providerLabel } from '../shared/dvmcp-discovery.js';
import type { NostrEvent } from '../shared/event.js';
import { bytesToHex } from '../shared/hex.js';
import { KIND } from '../shared/kinds.js';

const FORECAST = [{ name: 'forecast', inputSchema: { type: 'object' } }];

/** A server of `sk` announcing `forecast`. */
const server = (sk: Uint8Array, id: string, at: number, name?: string): NostrEvent[] => [
  ann(sk, id, at, name ? { name } : {}),
  finalizeEvent({ ...listAnnouncement(id, LISTS[0], FORECAST), created_at: at }, sk),
];
const contested = [...server(bridge, 'weather', T), ...server(stranger, 'zz', T + 200, 'weather')];
const flood = Array.from({ length: 100 }, (_, n) => server(stranger, `s${n}`, T + 10 + n)).flat();

/** Requests waiting for their payment (the CLI's POST /api/bridge/pay). */
const unpaid: Array<() => void> = [];

/** The bridge answers `from the bridge`; the stranger asks 5 sats, then answers `from a stranger`. */
function servers(e: NostrEvent, r: FakeRelay): void {
  const to = [['p', e.pubkey], ['e', e.id]];
  const provider = e.tags.find((t) => t[0] === 'p')?.[1];
  const answer = (sk: Uint8Array, text: string): void => r.deliver(finalizeEvent({ kind: KIND.DVMCP_RESPONSE, created_at: Math.floor(Date.now() / 1000), tags: to, content: JSON.stringify({ content: [{ type: 'text', text }] }) }, sk));
  if (provider === bridgePk) return answer(bridge, 'from the bridge');
  if (provider !== strangerPk) return;
  r.deliver(finalizeEvent({ kind: KIND.DVMCP_NOTIFICATION, created_at: Math.floor(Date.now() / 1000), tags: [...to, ['status', 'payment-required'], ['amount', '5', 'lnbc50n1pstranger']], content: '' }, stranger));
  unpaid.push(() => answer(stranger, 'from a stranger'));
}

/** NIP-11 naming `bridges`; /api/bridge/pay takes the invoice (a development deployment's local invoice). */
const routes =
  (bridges: string[]) =>
  (req: IncomingMessage, res: ServerResponse): void => {
    if (req.url === '/' && req.headers.accept === 'application/nostr+json') {
      res.writeHead(200, { 'content-type': 'application/nostr+json' }).end(JSON.stringify({ name: 'edgestr public shard', bridge_providers: bridges }));
    } else if (req.url === '/api/bridge/pay') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ sats: 5 }));
      setTimeout(() => unpaid.splice(0).forEach((go) => go()), 50);
    } else res.writeHead(404).end();
  };

let deployment: FakeRelay;
let bare: FakeRelay;

beforeAll(async () => {
  deployment = await fakeRelay({ onEvent: servers, onHttp: routes([bridgePk]) });
  bare = await fakeRelay({ onEvent: servers, onHttp: routes([]) });
  deployment.stored.push(...contested, ...flood);
  bare.stored.push(...contested);
});

afterAll(async () => {
  await deployment.close();
  await bare.close();
});

const run = (argv: string[]) => runCli(argv, { EDGESTR_KEY: bytesToHex(generateSecretKey()) });
const BRIDGE = providerLabel({ provider: bridgePk, preferred: true });
const STRANGER = providerLabel({ provider: strangerPk });

describe('edgestr tools and call: whose server', () => {
  it("tools: this deployment's bridge first and marked, whatever a stranger announced since", async () => {
    const r = await run(['tools', '--url', deployment.url]);
    expect(r.code).toBe(0);
    expect(r.stdout.split('\n')[0]).toBe(`weather    provider ${bridgePk}  (this deployment's bridge)`);
    expect(r.stdout).toContain(`zz  weather  provider ${strangerPk}\n`);
    expect(BRIDGE).toMatch(/^npub1[02-9ac-hj-np-z]{8}…[02-9ac-hj-np-z]{6} \(this deployment's bridge\)$/);
  });

  it("call weather: the bridge's server, its provider said before the call", async () => {
    const r = await run(['call', 'weather', 'forecast', '--url', deployment.url]);
    expect(r.stderr).toContain(`[calling forecast on weather, provider ${BRIDGE}]\n`);
    expect(r.stdout).toBe('from the bridge\n');
    expect(r.code).toBe(0);
  });

  it('call weather where the relay names no bridge: refused as ambiguous (exit 2), the candidates as <provider>:<id>', async () => {
    const r = await run(['call', 'weather', 'forecast', '--url', bare.url]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(`edgestr: weather names DVMCP servers of 2 providers, none of them this deployment's bridge; name one as <provider>:<id>: ${strangerPk}:zz, ${bridgePk}:weather\n`);
  });

  it("call <provider>:<id> of a stranger: the payment line says whose server asks, and that it is not this deployment's", async () => {
    const r = await run(['call', `${strangerPk}:zz`, 'forecast', '--url', deployment.url, '--max-sats', '10']);
    expect(r.stderr).toContain(`[calling forecast on zz, provider ${STRANGER}]\n`);
    expect(r.stderr).toContain(`[payment required: 5 sats to zz, provider ${STRANGER}]\n`);
    expect(STRANGER).toMatch(/ \(not one of this deployment's bridges\)$/);
    expect(r.stdout).toBe('from a stranger\n');
    expect(r.code).toBe(0);
  });
});
