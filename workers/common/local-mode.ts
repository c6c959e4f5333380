// The hosts and pages served in the local modes of EDGESTR_ENV (read by src/shared/env-mode.ts): `development` (npm start: public demo keys, every key gets a
// shard, private outbound hosts, free local payments) and `test` (the test suites: free local
// payments through the unauthenticated POST /api/bridge/pay). Neither belongs on a deployment
// (`npm run deploy` refuses both), and a Worker in either answers only requests whose URL host no
// deployment can have: loopback (127.0.0.0/8, localhost, [::1]) and, in test mode, the reserved
// `.test` domain (RFC 6761; the in-workerd suite's http://relay.test). On Cloudflare the URL host is
// the one the request was routed for, so this refuses everything on a deployment left in a local
// mode; under `wrangler dev` it is the client's Host header and keeps no other machine out: there,
// only the loopback address `npm start` binds does (scripts/start.mjs).
// Nor does the host keep out the web pages the developer visits: a page on any site can open
// `new WebSocket('ws://127.0.0.1:8787/')` (browsers apply no CORS to WebSockets) or send a "simple"
// POST (text/plain, no preflight), and the Host header is then loopback. A browser names the page
// in the Origin header, which a page cannot change; so in either mode a request whose Origin is not
// a loopback page (http(s)://localhost, 127.0.0.0/8 or [::1], any port; in test mode also `.test`
// hosts) is refused. Clients that are not browsers (the CLI, Node) send no Origin and are served.

import type { LocalMode } from '../../src/shared/env-mode.js';

/** The refusal (error text) of a request to `url` under `mode`, or undefined when the host is served. */
export function localHostRefusal(mode: LocalMode, url: URL): string | undefined {
  const host = url.hostname;
  if (isLoopbackHostname(host)) return undefined;
  if (mode === 'development') return 'development mode serves only loopback hosts; unset EDGESTR_ENV';
  if (host === 'test' || host.endsWith('.test')) return undefined;
  return 'test mode serves only loopback and .test hosts; unset EDGESTR_ENV';
}

const ORIGIN_SHOWN = 200;

/** Whether `hostname` (a URL's, so IPv4 is normalized) is loopback: localhost, 127.0.0.0/8 or [::1]. */
function isLoopbackHostname(hostname: string): boolean {
  return hostname === 'localhost' || hostname === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}

/**
 * The refusal (error text) of a request whose Origin header is `origin` under `mode`, or undefined
 * when it is served: no Origin (not a browser), or a page on loopback (in test mode also on a
 * `.test` host), over http or https. Anything else is refused, `null` (sandboxed frames, files) too.
 */
export function localOriginRefusal(mode: LocalMode, origin: string | null): string | undefined {
  if (origin === null) return undefined;
  let url: URL | undefined;
  try {
    url = new URL(origin);
  } catch {
    url = undefined;
  }
  if (url && (url.protocol === 'http:' || url.protocol === 'https:')) {
    const host = url.hostname;
    if (isLoopbackHostname(host)) return undefined;
    if (mode === 'test' && (host === 'test' || host.endsWith('.test'))) return undefined;
  }
  const shown = origin.length > ORIGIN_SHOWN ? `${origin.slice(0, ORIGIN_SHOWN)}…` : origin;
  return mode === 'development'
    ? `development mode accepts browser requests only from loopback pages (Origin ${shown})`
    : `test mode accepts browser requests only from loopback and .test pages (Origin ${shown})`;
}
