// Sessions with calls in flight (workers/common/mcp-session-cache.ts `use`): a stranger opening
// sessions (fresh Nostr keys to the bridge, fresh senders to a public agent) must not close a
// session under another client's call. Eviction, idle sweeping and a server change skip or defer
// sessions with calls in flight; when every session that could make room is busy the new one is
// refused with "too many MCP sessions in use (<n>); try again shortly", which the bridge answers as
// a JSON-RPC error and the agent as a tool error. And the agent's cache (workers/agent/mcp-sessions.ts)
// keeps its owner's sessions from strangers. Real sessions to the fixture server's /mcp-paged (its
// `slow` tool answers after `ms`) and /mcp-expire (?keep=1: sessions kept).
import { describe, expect, inject, it } from 'vitest';
import '../mcp/provided.js';
import { outboundPolicy } from '../../src/shared/outbound-url.js';
import { McpSessionCache } from '../../workers/common/mcp-session-cache.js';
import type { McpSession } from '../../workers/common/mcp-client.js';
import { connectMcpServer, mcpSessionKey } from '../../workers/agent/tools/mcp.js';
import { AGENT_MCP_SESSIONS, agentMcpSessions } from '../../workers/agent/mcp-sessions.js';
import { UpstreamServer, serverOfSessionKey } from '../../workers/bridge/upstream.js';
import type { StoredServer } from '../../workers/bridge/config.js';
import { randomHex } from './helpers.js';

const LOCAL = outboundPolicy({ EDGESTR_OUTBOUND_ALLOW: '127.0.0.1:*' });
const FIXTURE = inject('toolsFixtureUrl');
const PAGED = { url: `${FIXTURE}/mcp-paged` };
const FINALLY = { content: [{ type: 'text', text: 'finally' }] };
const BUSY = (n: number) => `too many MCP sessions in use (${n}); try again shortly`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A `slow` tools/call of `ms` on `key`'s session, inside the cache's lease. */
const slowCall = (cache: McpSessionCache, key: string, ms: number, server: { url: string; headers?: Record<string, string> } = PAGED) =>
  cache.use(key, server, { policy: LOCAL }, (s) => s.request('tools/call', { name: 'slow', arguments: { ms } }));

/** Opens `key`'s session and ends the lease (the session stays, idle). */
const touch = (cache: McpSessionCache, key: string, server: { url: string } = PAGED) => cache.use(key, server, { policy: LOCAL }, async (s: McpSession) => s);

describe('a session with a call in flight', () => {
  it('is not evicted: a new key closes an idle session, and is refused when every session is busy', async () => {
    const cache = new McpSessionCache({ maxSessions: 2 });
    try {
      const a = slowCall(cache, 'a', 1500);
      const b = await touch(cache, 'b');
      expect(b.ok).toBe(true);
      const c = slowCall(cache, 'c', 600); // the cache is full: b (idle) makes room, not a
      await sleep(100);
      expect(['a', 'b', 'c'].map((k) => cache.has(k))).toEqual([true, false, true]);
      expect(b.ok && b.value.closed).toBe(true);
      expect(await touch(cache, 'd')).toEqual({ ok: false, error: { kind: 'busy', message: BUSY(2) } });
      expect(cache.size).toBe(2);
      expect(await c).toEqual({ ok: true, value: { ok: true, value: FINALLY } });
      expect(await a).toEqual({ ok: true, value: { ok: true, value: FINALLY } });
      expect((await touch(cache, 'd')).ok).toBe(true); // c is idle now: it makes room
      expect(['a', 'c', 'd'].map((k) => cache.has(k))).toEqual([true, false, true]);
    } finally {
      await cache.closeAll();
    }
  });

  it('is not closed as idle while its call lasts longer than idleTtlMs', async () => {
    const cache = new McpSessionCache({ idleTtlMs: 300 });
    try {
      const a = slowCall(cache, 'a', 1200);
      await sleep(700);
      expect((await touch(cache, 'b')).ok).toBe(true); // sweeps idle sessions: a is busy
      expect(cache.has('a')).toBe(true);
      expect(await a).toEqual({ ok: true, value: { ok: true, value: FINALLY } });
    } finally {
      await cache.closeAll();
    }
  });

  it('whose server changed is replaced at once and closed when its call ends', async () => {
    const cache = new McpSessionCache();
    try {
      const old = await touch(cache, 'a');
      if (!old.ok) throw new Error(old.error.message);
      const a = slowCall(cache, 'a', 1000);
      await sleep(100);
      const moved = await cache.use('a', { ...PAGED, headers: { authorization: 'Bearer new' } }, { policy: LOCAL }, (s) => s.request('tools/call', { name: 'whoami', arguments: {} }));
      expect(moved).toEqual({ ok: true, value: { ok: true, value: { content: [{ type: 'text', text: 'authorization: Bearer new' }] } } });
      expect(old.value.closed).toBe(false);
      expect(await a).toEqual({ ok: true, value: { ok: true, value: FINALLY } });
      expect(old.value.closed).toBe(true);
      expect(cache.size).toBe(1);
    } finally {
      await cache.closeAll();
    }
  });
});

describe('the refusal as the caller reports it', () => {
  it('bridge: a JSON-RPC error to the client, not an upstream failure; the call in flight completes', async () => {
    const stored: StoredServer = { id: 'up', url: PAGED.url, header_names: [], public: true, encryption: false, prices: {}, created_at: 0, updated_at: 0 };
    const contacts: (string | null)[] = [];
    const outages: string[] = [];
    const cache = new McpSessionCache({ maxSessions: 2, groupOf: serverOfSessionKey, maxPerGroup: 1 });
    const upstream = new UpstreamServer(stored, {
      cache,
      policy: async () => LOCAL,
      headers: async () => ({}),
      onContact: (_id, error) => contacts.push(error),
      onClientOutage: (id) => outages.push(id),
      onNotification: () => undefined,
    });
    const ctx = (client: string) => ({ requester: { requestId: randomHex(32), client }, form: 'plain' as const, signal: new AbortController().signal, onProgress: () => undefined });
    try {
      const first = upstream.request('tools/call', { name: 'slow', arguments: { ms: 1200 } }, ctx('alice'));
      await sleep(300);
      expect(await upstream.initialize('bob')).toEqual({ ok: false, error: { code: -32603, message: `upstream up: ${BUSY(1)}` } });
      expect(await upstream.request('tools/list', {}, ctx('carol'))).toEqual({ ok: false, error: { code: -32603, message: `upstream up: ${BUSY(1)}` } });
      expect(await first).toEqual({ ok: true, value: FINALLY });
      expect(contacts.every((c) => c === null)).toBe(true);
      expect(outages).toEqual([]); // a busy session says nothing of upstream
      expect((await upstream.initialize('bob')).ok).toBe(true); // alice's session is idle now
    } finally {
      await cache.closeAll();
    }
  });

  it('agent: a tool error, and a connection problem; the call in flight completes', async () => {
    const sessions = new McpSessionCache({ maxSessions: 1 });
    const server = { id: 'p', url: PAGED.url };
    const connect = async (scope: string) => {
      const c = await connectMcpServer(server, { policy: LOCAL, sessions, scope });
      if (!c.ok) throw new Error(c.error);
      return c.value;
    };
    const run = (c: Awaited<ReturnType<typeof connect>>, name: string, args: Record<string, unknown>) =>
      c.tools.find((t) => t.definition.name === name)!.run(args, { signal: new AbortController().signal });
    try {
      const alice = await connect('alice');
      const bob = await connect('bob'); // alice's session was idle: it made room
      const slow = run(bob, 'p__slow', { ms: 1200 });
      await sleep(300);
      expect(await run(alice, 'p__lookup', { word: 'x' })).toEqual({ ok: false, error: `MCP p__lookup: ${BUSY(1)}`, output: { stdout: '', stderr: `MCP p__lookup: ${BUSY(1)}`, exit_code: 1 } });
      expect(await connectMcpServer(server, { policy: LOCAL, sessions, scope: 'carol' })).toEqual({ ok: false, error: `MCP server p: ${BUSY(1)}` });
      expect(await slow).toEqual({ ok: true, output: { stdout: 'finally', stderr: '', exit_code: 0 } });
      expect((await run(alice, 'p__lookup', { word: 'x' })).output?.stdout).toBe('definition of x');
    } finally {
      await sessions.closeAll();
    }
  });
});

describe('the agent’s cache (workers/agent/mcp-sessions.ts)', () => {
  it('strangers fill their share and never close the owner’s sessions; the owner’s new session closes a stranger’s', async () => {
    const owner = randomHex(32);
    const cache = agentMcpSessions(() => owner);
    const server = { url: `${FIXTURE}/mcp-expire?keep=1&bucket=${randomHex(8)}` };
    const open = async (key: string) => expect((await touch(cache, key, server)).ok).toBe(true);
    const ownerKeys = [mcpSessionKey('p', owner), mcpSessionKey('p')];
    try {
      for (const k of ownerKeys) await open(k);
      const strangers = Array.from({ length: 40 }, () => mcpSessionKey('p', randomHex(32)));
      for (const k of strangers) await open(k);
      expect(ownerKeys.map((k) => cache.has(k))).toEqual([true, true]);
      expect(cache.size).toBe(2 + AGENT_MCP_SESSIONS.others);
      expect(strangers.filter((k) => cache.has(k))).toEqual(strangers.slice(-AGENT_MCP_SESSIONS.others));
      // The owner's sessions on other servers fill the cache (32), then one more closes a stranger's.
      const more = Array.from({ length: 7 }, (_, i) => mcpSessionKey(`s${i}`, owner));
      for (const k of more) await open(k);
      expect(cache.size).toBe(AGENT_MCP_SESSIONS.all);
      expect(strangers.filter((k) => cache.has(k))).toEqual(strangers.slice(1 - AGENT_MCP_SESSIONS.others)); // the least recently used closed
      // A full cache: a new stranger closes a stranger's session, never the owner's.
      const late = mcpSessionKey('p', randomHex(32));
      await open(late);
      expect([...ownerKeys, ...more].every((k) => cache.has(k))).toBe(true);
      expect(cache.has(late)).toBe(true);
      expect(cache.size).toBe(AGENT_MCP_SESSIONS.all);
    } finally {
      await cache.closeAll();
    }
  });

  it('strangers whose sessions are all busy are refused; the owner still gets one', async () => {
    const owner = randomHex(32);
    const cache = agentMcpSessions(() => owner);
    try {
      const strangers = Array.from({ length: AGENT_MCP_SESSIONS.others }, () => mcpSessionKey('p', randomHex(32)));
      const calls = strangers.map((k) => slowCall(cache, k, 1500));
      await sleep(300);
      expect(await touch(cache, mcpSessionKey('p', randomHex(32)))).toEqual({ ok: false, error: { kind: 'busy', message: BUSY(AGENT_MCP_SESSIONS.others) } });
      expect((await touch(cache, mcpSessionKey('p', owner))).ok).toBe(true);
      expect(await Promise.all(calls)).toEqual(strangers.map(() => ({ ok: true, value: { ok: true, value: FINALLY } })));
    } finally {
      await cache.closeAll();
    }
  });
});
