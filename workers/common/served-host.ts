// The one hostname a deployment answers on. With EDGESTR_PUBLIC_URL set, outside the local modes of
// EDGESTR_ENV, a request whose URL hostname is not that URL's gets 421 JSON `this deployment is
// served at <EDGESTR_PUBLIC_URL>`: HTTP, WebSocket upgrades, NIP-11 and /health alike (the port is
// not compared: Cloudflare serves a hostname on several). Why: the own-host rule of the outbound
// policy (src/shared/outbound-url.ts) knows EDGESTR_PUBLIC_URL's host and the origins a dial saw;
// a Worker also served under another name (its workers.dev one next to a custom domain, preview
// URLs, another route) would answer there too, so an owner's bridge server at
// https://edgestr.<account>.workers.dev/mcp or a web_fetch of `*.workers.dev` reached this very
// deployment (a loop). Served on one hostname, such a dial gets this 421 and nothing else. On
// Cloudflare the URL hostname is the one the request was routed for. A malformed EDGESTR_PUBLIC_URL
// fails every request (500) rather than serve every name. Without EDGESTR_PUBLIC_URL any hostname
// is served (`npm run deploy` requires it); the local modes have their own host rule
// (workers/common/local-mode.ts).

import { localMode } from '../../src/shared/env-mode.js';

export const PUBLIC_URL_NOT_A_URL = 'EDGESTR_PUBLIC_URL is not a URL; fix the deployment configuration';

export interface ServedHostRefusal {
  status: 421 | 500;
  error: string;
}

/** A hostname without the trailing dot of its absolute form (`relay.example.org.` is the same host). */
const bare = (hostname: string): string => hostname.replace(/\.$/, '');

/** The refusal of a request to `url` under `env`, or undefined when this deployment serves its hostname. */
export function servedHostRefusal(env: { EDGESTR_ENV?: string; EDGESTR_PUBLIC_URL?: string }, url: URL): ServedHostRefusal | undefined {
  if (localMode(env) || !env.EDGESTR_PUBLIC_URL) return undefined;
  let pub: URL;
  try {
    pub = new URL(env.EDGESTR_PUBLIC_URL);
  } catch {
    return { status: 500, error: PUBLIC_URL_NOT_A_URL };
  }
  if (bare(url.hostname) === bare(pub.hostname)) return undefined;
  return { status: 421, error: `this deployment is served at ${env.EDGESTR_PUBLIC_URL}` };
}
