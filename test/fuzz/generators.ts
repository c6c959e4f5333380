// Generators for the fuzz runs (test/workers/fuzz-relay.test.ts): random and mutated client frames
// for the relay's WebSocket endpoints, and random requests for /api/agents. Pure fast-check
// arbitraries (no Worker or Node APIs), drawn with a seed so that a run is reproducible.

import fc from 'fast-check';
import { finalizeEvent } from 'nostr-tools/pure';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';

export interface FuzzKeys {
  sk: Uint8Array;
  pk: string;
}

/** Awkward JSON values: huge and fractional numbers, deep nesting, long strings, odd types. */
export const awkward: fc.Arbitrary<unknown> = fc.oneof(
  { arbitrary: fc.constantFrom(0, -1, 1.5, 2 ** 31, 2 ** 32, 2 ** 53 + 1, 1e21, 1e308, -1e308, '', null, true, false, [], {}), weight: 3 },
  { arbitrary: fc.jsonValue({ maxDepth: 3 }), weight: 3 },
  { arbitrary: fc.string({ maxLength: 80 }), weight: 2 },
  { arbitrary: fc.integer({ min: 1, max: 60 }).map((n) => nest(n)), weight: 1 },
  { arbitrary: fc.integer({ min: 1_000, max: 60_000 }).map((n) => 'x'.repeat(n)), weight: 1 },
);

function nest(depth: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = [v];
  return v;
}

const hex = (n: number) => fc.stringMatching(new RegExp(`^[0-9a-f]{${n}}$`));
const letter = fc.constantFrom(...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'.split(''));

/** Random filters: known fields with random (often wrong) values, tag filters, unknown fields. */
export const filter: fc.Arbitrary<Record<string, unknown>> = fc
  .record(
    {
      ids: fc.oneof(fc.array(hex(64), { maxLength: 5 }), awkward),
      authors: fc.oneof(fc.array(hex(64), { maxLength: 5 }), fc.array(fc.string({ maxLength: 70 }), { maxLength: 3 }), awkward),
      kinds: fc.oneof(fc.array(fc.integer({ min: -2, max: 70_000 }), { maxLength: 6 }), awkward),
      since: fc.oneof(fc.integer({ min: -10, max: 2 ** 33 }), awkward),
      until: fc.oneof(fc.integer({ min: -10, max: 2 ** 33 }), awkward),
      limit: fc.oneof(fc.integer({ min: -5, max: 10_000_000 }), awkward),
    },
    { requiredKeys: [] },
  )
  .chain((base) =>
    fc
      .array(
        fc.tuple(
          fc.oneof(letter.map((l) => `#${l}`), fc.string({ maxLength: 4 })),
          // Long tag lists too: several of them in one filter is the planner's worst case (issue 7 #1).
          fc.oneof(fc.array(fc.string({ maxLength: 70 }), { maxLength: 40 }), fc.array(hex(16), { minLength: 200, maxLength: 400 }), awkward),
        ),
        { maxLength: 3 },
      )
      .map((extra) => ({ ...base, ...Object.fromEntries(extra.filter(([k]) => k !== '__proto__')) })),
  );

const KINDS = [0, 1, 3, 5, 7, 1059, 10002, 20001, 21059, 22242, 24200, 25800, 25801, 25802, 25803, 25804, 25805, 25806, 25910, 30023, 31340];

/** A validly signed event of an interesting kind with random tags and content. */
export const signedEvent = (signers: FuzzKeys[]): fc.Arbitrary<Record<string, unknown>> =>
  fc
    .record({
      who: fc.nat(signers.length - 1),
      kind: fc.oneof(fc.constantFrom(...KINDS), fc.integer({ min: 0, max: 65535 })),
      content: fc.oneof(fc.string({ maxLength: 200 }), fc.integer({ min: 1, max: 100_000 }).map((n) => 'c'.repeat(n))),
      tags: fc.array(fc.array(fc.oneof(fc.string({ maxLength: 70 }), hex(64), fc.constantFrom('p', 'e', 'a', 'd', 'expiration', '-', 'auth', 's')), { minLength: 1, maxLength: 4 }), {
        maxLength: 8,
      }),
      created_at: fc.oneof(fc.constant(-1), fc.integer({ min: -1000, max: 1000 })),
    })
    .map(({ who, kind, content, tags, created_at }) => {
      const now = Math.floor(Date.now() / 1000);
      const e = finalizeEvent({ kind, content, tags, created_at: created_at === -1 ? now : now + created_at }, signers[who]!.sk);
      return { id: e.id, pubkey: e.pubkey, created_at: e.created_at, kind: e.kind, tags: e.tags, content: e.content, sig: e.sig };
    });

/** A signed event with one field changed after signing (or an extra field, or a field removed). */
export const mutatedEvent = (signers: FuzzKeys[]): fc.Arbitrary<unknown> =>
  fc.tuple(signedEvent(signers), fc.constantFrom('id', 'pubkey', 'created_at', 'kind', 'tags', 'content', 'sig', 'extra', 'remove'), awkward).map(([e, field, v]) => {
    if (field === 'remove') {
      const { sig: _sig, ...rest } = e;
      return rest;
    }
    return { ...e, [field]: v };
  });

/** One client frame as text. `challenge` and `relayUrl` make some AUTH frames nearly right. */
export function frame(signers: FuzzKeys[], auth: { challenge: string; relayUrl: string }): fc.Arbitrary<string> {
  const subId = fc.oneof(fc.string({ maxLength: 10 }), fc.string({ minLength: 60, maxLength: 300 }), awkward);
  const authEvent = fc
    .record({
      who: fc.nat(signers.length - 1),
      challenge: fc.oneof(fc.constant(auth.challenge), fc.string({ maxLength: 40 })),
      relay: fc.oneof(fc.constant(auth.relayUrl), fc.constant(auth.relayUrl + '/'), fc.webUrl()),
      kind: fc.oneof(fc.constant(22242), fc.integer({ min: 0, max: 65535 })),
      created_at: fc.integer({ min: -1000, max: 1000 }),
    })
    .map(({ who, challenge, relay, kind, created_at }) =>
      finalizeEvent({ kind, created_at: Math.floor(Date.now() / 1000) + created_at, tags: [['relay', relay], ['challenge', challenge]], content: '' }, signers[who]!.sk),
    );
  const json = fc.oneof(
    { arbitrary: fc.tuple(fc.constant('EVENT'), signedEvent(signers)), weight: 4 },
    { arbitrary: fc.tuple(fc.constant('EVENT'), mutatedEvent(signers)), weight: 3 },
    { arbitrary: fc.tuple(fc.constant('REQ'), subId, filter, fc.array(filter, { maxLength: 3 })).map(([v, s, f, more]) => [v, s, f, ...more]), weight: 4 },
    { arbitrary: fc.tuple(fc.constant('COUNT'), subId, filter).map((x) => [...x]), weight: 2 },
    { arbitrary: fc.tuple(fc.constant('CLOSE'), subId).map((x) => [...x]), weight: 1 },
    { arbitrary: fc.tuple(fc.constant('AUTH'), fc.oneof(authEvent, mutatedEvent(signers))).map((x) => [...x]), weight: 2 },
    { arbitrary: fc.tuple(fc.constantFrom('PING', 'NEG-OPEN', 'event', 'REQ ', ''), awkward).map((x) => [...x]), weight: 1 },
    { arbitrary: fc.array(awkward, { maxLength: 4 }), weight: 1 },
    { arbitrary: awkward, weight: 1 },
  );
  return fc.oneof(
    { arbitrary: json.map((v) => JSON.stringify(v) ?? 'null'), weight: 8 },
    // Broken JSON: a valid frame cut short, or random text.
    { arbitrary: fc.tuple(json.map((v) => JSON.stringify(v) ?? 'null'), fc.nat()).map(([s, n]) => s.slice(0, n % Math.max(1, s.length))), weight: 1 },
    { arbitrary: fc.string({ maxLength: 200 }), weight: 1 },
    // Deep nesting as raw text (JSON.stringify of a deep value would be the same).
    { arbitrary: fc.integer({ min: 100, max: 20_000 }).map((n) => `["REQ","deep",${'['.repeat(n)}${']'.repeat(n)}]`), weight: 1 },
  );
}

export interface ApiRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: string;
}

/** Random requests for /api/agents: methods, paths, Authorization headers (some valid), bodies. */
export function apiRequest(base: string, owner: FuzzKeys, agent: string): fc.Arbitrary<ApiRequest> {
  const path = fc.oneof(
    fc.constant('/api/agents'),
    fc.constant(`/api/agents/${agent}`),
    hex(64).map((h) => `/api/agents/${h}`),
    fc.string({ maxLength: 30 }).map((s) => `/api/agents/${encodeURIComponent(s)}`),
    fc.constantFrom('/api/agents/', '/api/agents?x=1', '/api/agents/npub1xyz', '/api/other', '/api'),
  );
  const body = fc.option(
    fc.oneof(
      fc.string({ maxLength: 200 }),
      fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
      fc.record({ name: fc.oneof(fc.string({ maxLength: 120 }), awkward), provider: fc.oneof(fc.constantFrom('echo', 'openai', 'x'), awkward), limits: awkward }, { requiredKeys: [] }).map((v) => JSON.stringify(v)),
      fc.integer({ min: 1000, max: 200_000 }).map((n) => `{"name":"${'n'.repeat(n)}"}`),
    ),
    { nil: undefined },
  );
  return fc
    .record({
      method: fc.constantFrom('GET', 'POST', 'PATCH', 'DELETE', 'PUT', 'OPTIONS', 'HEAD'),
      path,
      body,
      auth: fc.constantFrom('valid', 'wrong-url', 'random', 'none', 'stale'),
      junk: fc.string({ maxLength: 100 }),
      contentType: fc.constantFrom('application/json', 'text/plain', '', 'application/x-www-form-urlencoded'),
    })
    .map(({ method, path, body, auth, junk, contentType }) => {
      const url = `${base}${path}`;
      const sent = method === 'GET' || method === 'HEAD' ? undefined : body;
      const headers: Record<string, string> = {};
      if (contentType) headers['Content-Type'] = contentType;
      if (auth === 'valid') headers.Authorization = makeHttpAuthHeader(owner.sk, url, method, sent);
      if (auth === 'wrong-url') headers.Authorization = makeHttpAuthHeader(owner.sk, `${base}/api/agents/x`, method, sent);
      if (auth === 'stale') headers.Authorization = makeHttpAuthHeader(owner.sk, url, method, sent, Math.floor(Date.now() / 1000) - 3600);
      if (auth === 'random') headers.Authorization = `Nostr ${junk}`;
      return { method, path, headers, ...(sent !== undefined ? { body: sent } : {}) };
    });
}

export interface RouterRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
}

/** Random requests on the router's own paths: shards (upgrade or NIP-11), /health, unknown paths. */
export function routerRequest(owner: string): fc.Arbitrary<RouterRequest> {
  const path = fc.oneof(
    fc.constantFrom('/', '/health', `/r/${owner}`, `/r/${owner.toUpperCase()}`, `/r/${owner}/`, '/r/', '/r', '/console', '/mcp', '/api', '/favicon.ico', '//', '/r/npub1', '/%00'),
    fc.string({ maxLength: 80 }).map((x) => `/r/${encodeURIComponent(x)}`),
    fc.webPath({ size: 'small' }),
  );
  return fc
    .record({
      method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'HEAD', 'PATCH'),
      path,
      upgrade: fc.constantFrom('websocket', 'WebSocket', 'h2c', ''),
      accept: fc.constantFrom('application/nostr+json', 'text/html, application/nostr+json;q=0.9', '*/*', '', 'application/json'),
      extra: fc.constantFrom<Record<string, string>>({}, { 'x-edgestr-internal': 'agent' }, { 'x-edgestr-shard': 'public' }, { 'CF-Connecting-IP': 'not an ip' }),
    })
    .map(({ method, path, upgrade, accept, extra }) => {
      const headers: Record<string, string> = { ...extra };
      if (upgrade) headers.Upgrade = upgrade;
      if (accept) headers.Accept = accept;
      return { method, path, headers };
    });
}
