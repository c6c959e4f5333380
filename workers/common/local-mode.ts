// The local modes of EDGESTR_ENV: `development` (npm start: public demo keys, every key gets a
// shard, private outbound hosts, free local payments) and `test` (the test suites: free local
// payments through the unauthenticated POST /api/bridge/pay). Neither belongs on a deployment
// (`npm run deploy` refuses both), and a Worker in either answers only requests whose URL host no
// deployment can have: loopback (127.0.0.1, localhost, [::1]) and, in test mode, the reserved
// `.test` domain (RFC 6761; the in-workerd suite's http://relay.test). On Cloudflare the URL host is
// the one the request was routed for, so this refuses everything on a deployment left in a local
// mode; under `wrangler dev` it is the client's Host header and keeps no other machine out: there,
// only the loopback address `npm start` binds does (scripts/start.mjs).

export type LocalMode = 'development' | 'test';

const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

/** The local mode `env` is in, if any. */
export function localMode(env: { EDGESTR_ENV?: string }): LocalMode | undefined {
  return env.EDGESTR_ENV === 'development' || env.EDGESTR_ENV === 'test' ? env.EDGESTR_ENV : undefined;
}

/** The refusal (error text) of a request to `url` under `mode`, or undefined when the host is served. */
export function localHostRefusal(mode: LocalMode, url: URL): string | undefined {
  const host = url.hostname;
  if (LOOPBACK_HOSTS.has(host)) return undefined;
  if (mode === 'development') return 'development mode serves only loopback hosts; unset EDGESTR_ENV';
  if (host === 'test' || host.endsWith('.test')) return undefined;
  return 'test mode serves only loopback and .test hosts; unset EDGESTR_ENV';
}
