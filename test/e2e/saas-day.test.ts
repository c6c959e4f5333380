// A SaaS day end to end, from Node against its own `wrangler dev` with operators and plans
// (EDGESTR_ADMINS, EDGESTR_PLANS): the operator adds two owners on different plans, each creates
// an agent through the management API, strangers prompt both agents over the relay as NIP-XX
// clients until the smaller plan's runs for the day are used up (RATE_LIMIT naming the quota),
// and /api/usage (the owners', the operator's, and CSV) shows exactly the runs that happened.

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { checkIdAndSignature, type NostrEvent } from '../../src/shared/event.js';
import { ConversationKeyCache, decrypt, encrypt } from '../../src/shared/nip44.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { nobleVerifier } from '../../src/shared/verify.js';
import { startWrangler, type RunningWorker } from './global-setup.js';
import { E2E_SECRET } from './e2e-keys.js';
import { clientFactory, newKey, signed, signer, sleep, waitFor, type Key } from './helpers.js';

const admin = newKey();
const PLANS = { default: {}, starter: { runs_per_day: 3 }, pro: { runs_per_day: 100 } };
let worker: RunningWorker;
const clients = clientFactory();
afterEach(() => clients.closeAll());
const cache = new ConversationKeyCache(64);

beforeAll(async () => {
  worker = await startWrangler('saas', [
    `EDGESTR_ADMINS:${admin.pk}`,
    `EDGESTR_PLANS:${JSON.stringify(PLANS)}`,
    `EDGESTR_SECRET:${E2E_SECRET}`,
    'EDGESTR_ENV:test',
  ]);
}, 120_000);

afterAll(async () => {
  await worker?.cleanup();
});

async function api(key: Key, method: string, path: string, body?: unknown, accept?: string): Promise<{ status: number; json: unknown; text: string }> {
  const url = `${worker.httpUrl}${path}`;
  const text = body === undefined ? undefined : JSON.stringify(body);
  const res = await fetch(url, {
    method,
    headers: { Authorization: makeHttpAuthHeader(key.sk, url, method, text), ...(text ? { 'Content-Type': 'application/json' } : {}), ...(accept ? { Accept: accept } : {}) },
    ...(text !== undefined ? { body: text } : {}),
  });
  const raw = await res.text();
  return { status: res.status, json: raw && !accept ? (JSON.parse(raw) as unknown) : null, text: raw };
}

/** A stranger's one prompt to `agent` on `owner`'s shard: the decrypted terminal (kind and payload). */
async function prompt(owner: string, agent: string, message: string): Promise<{ kind: number; payload: Record<string, unknown> }> {
  const key = newKey();
  const { client } = clients.create(`${worker.httpUrl.replace(/^http/, 'ws')}/r/${owner}`, {
    auth: signer(key),
    verify: (e: NostrEvent) => checkIdAndSignature(e, nobleVerifier).ok,
    reconnect: false,
  });
  expect(await client.connect()).toMatchObject({ ok: true });
  expect(await client.authenticate()).toMatchObject({ ok: true });
  const terminals: NostrEvent[] = [];
  await new Promise<void>((resolve) => client.subscribe([{ kinds: [25803, 25805], '#p': [key.pk] }], { onEvent: (e) => void terminals.push(e), onEose: () => resolve() }));
  const conv = cache.get(key.sk, agent);
  const e = signed(key, 25802, encrypt(JSON.stringify({ ver: 1, message }), conv), [['p', agent], ['encryption', 'nip44']]);
  expect(await client.publish(e)).toMatchObject({ ok: true });
  await waitFor(() => terminals.some((t) => t.tags.some((x) => x[0] === 'e' && x[1] === e.id)), `the answer to ${e.id}`, 20_000);
  const t = terminals.find((x) => x.tags.some((y) => y[0] === 'e' && y[1] === e.id))!;
  const text = decrypt(t.content, conv);
  if (!text.ok) throw new Error(text.error);
  client.close();
  return { kind: t.kind, payload: JSON.parse(text.value) as Record<string, unknown> };
}

type Row = { key: string; runs: number; input_tokens: number; output_tokens: number; tool_calls: number; errors: number };

describe('a SaaS day', () => {
  it('two owners on two plans; strangers prompt until the starter plan runs out; usage matches the runs', async () => {
    const [starter, pro] = [newKey(), newKey()];
    expect((await api(admin, 'POST', '/api/admin/owners', { pubkey: starter.pk, plan: 'starter' })).status).toBe(201);
    expect((await api(admin, 'POST', '/api/admin/owners', { pubkey: pro.pk, plan: 'pro' })).status).toBe(201);
    expect((await api(starter, 'GET', '/api/admin/owners')).status).toBe(403);

    const agentOf = async (owner: Key): Promise<string> => {
      const r = await api(owner, 'POST', '/api/agents', { name: 'saas day', provider: 'echo' });
      expect(r.status).toBe(201);
      return (r.json as { pubkey: string }).pubkey;
    };
    const [a, b] = [await agentOf(starter), await agentOf(pro)];

    const answered = { [a]: [] as Array<Record<string, unknown>>, [b]: [] as Array<Record<string, unknown>> };
    let refusal: Record<string, unknown> | undefined;
    for (let i = 0; i < 5; i++) {
      for (const [owner, agent] of [[starter.pk, a], [pro.pk, b]] as const) {
        const r = await prompt(owner, agent, `question ${i} from a stranger`);
        if (r.kind === 25803) answered[agent]!.push(r.payload);
        else refusal = r.payload;
      }
    }
    // Strangers may use 90 % of the owner's plan (rounded down: 2 of starter's 3 runs); the rest is kept for the owner.
    expect(answered[a]).toHaveLength(2);
    expect(answered[b]).toHaveLength(5);
    // A stranger learns which quota and when it resets, neither the plan's runs nor the owner's (workers/agent/told-to.ts).
    expect(refusal).toEqual({ ver: 1, code: 'RATE_LIMIT', message: 'the agent’s owner reached a usage limit for today (UTC)', retry_after: expect.any(Number), details: { quota: 'runs_per_day' } });
    expect(refusal!.retry_after).toBeGreaterThan(0);

    const want = (agent: string): Row => {
      const usage = answered[agent]!.map((p) => p.usage as { input_tokens: number; output_tokens: number });
      return {
        key: agent,
        runs: usage.length,
        input_tokens: usage.reduce((n, u) => n + u.input_tokens, 0),
        output_tokens: usage.reduce((n, u) => n + u.output_tokens, 0),
        tool_calls: 0,
        errors: 0,
      };
    };
    const rowsOf = async (key: Key, query: string): Promise<Row[]> => ((await api(key, 'GET', `/api/usage?${query}`)).json as { rows: Row[] }).rows;
    // Each run reaches the aggregate as its answer goes out: wait for the last one.
    let own: Row[] = [];
    for (let i = 0; i < 50 && (own[0]?.runs ?? 0) < 5; i++) {
      own = await rowsOf(pro, 'by=agent');
      if ((own[0]?.runs ?? 0) < 5) await sleep(100);
    }
    expect(own).toEqual([want(b)]);
    expect(await rowsOf(starter, 'by=agent')).toEqual([want(a)]);
    const all = await rowsOf(admin, 'by=agent');
    expect(all).toEqual([want(a), want(b)].sort((x, y) => x.key.localeCompare(y.key)));
    const csv = await api(starter, 'GET', '/api/usage?by=agent', undefined, 'text/csv');
    const r = want(a);
    expect(csv.text).toBe(`key,runs,input_tokens,output_tokens,tool_calls,errors\r\n${r.key},${r.runs},${r.input_tokens},${r.output_tokens},0,0\r\n`);
  });
});
