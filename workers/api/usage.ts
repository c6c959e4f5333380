// Usage figures, NIP-98 authenticated: an owner sees its own, an operator (EDGESTR_ADMINS) every
// owner's (or one, with `owner=`).
// - GET /api/usage?from=&to=&by=agent|sender|model|day: agent runs, from the Accounts DO's per-owner
//   aggregate (runs summed per UTC day, agent, sender and model).
// - GET /api/usage/bridge?from=&to=&by=server|method|day: calls of the owner's bridge (Bridge DO
//   metering: calls and their summed duration per UTC day, server and method); operators name the owner.
// - GET /api/usage/storage: the owner's shard's stored events and bytes, with the plan's stored_bytes.
// `from` and `to` are UTC days (YYYY-MM-DD, inclusive; default: the last 30 days), at most
// MAX_RANGE_DAYS apart. JSON `{rows}` or, with `Accept: text/csv`, CSV. The run figures are read
// within bounds (accounts-do.ts): a range holding more rows than one query reads is answered for
// the days that fit, `{rows, truncated: true, through}` (CSV: the X-Usage-Through header), and a
// caller past its rows a minute gets 429 with Retry-After.

import { toCsv } from './csv.js';
import { Hono } from 'hono';
import { z } from 'zod';
import { parsePubkey } from '../../src/shared/keys.js';
import { accountsStub, USAGE_KEYS, type AccountsBindings } from '../accounts/accounts-do.js';
import { isAdmin, notAnOwner, staticOwners, type OwnerEnv } from '../common/owners.js';
import { shardStub, type ShardBindings } from '../common/shards.js';
import { DEFAULT_PLAN, planLimits, type PlanEnv } from '../accounts/plans.js';
import type { BridgeCallRow } from '../bridge/metering.js';
import { limitsFromEnv } from '../relay-do/limits.js';
import { storageLimit } from '../relay-do/owner-plan.js';
import { bridgeStub, type BridgeApiBindings } from './bridge.js';
import { issuesOf } from './agents.js';
import type { ApiStateBindings } from './api-state.js';
import { nip98, type AuthedVariables } from './nip98-auth.js';

export interface UsageApiBindings extends ApiStateBindings, AccountsBindings, ShardBindings, OwnerEnv, PlanEnv, Pick<BridgeApiBindings, 'BRIDGE'> {
  /** The relay's limits (workers/relay-do/limits.ts): max_stored_bytes bounds every plan's stored_bytes. */
  RELAY_LIMITS?: string;
}

type ApiEnv = { Bindings: UsageApiBindings; Variables: AuthedVariables };

export const MAX_RANGE_DAYS = 366;
const DAY_MS = 86_400_000;
const dayOf = (ms: number): string => new Date(ms).toISOString().slice(0, 10);
const Day = z.string().regex(/^\d{4}-\d{2}-\d{2}$/, 'a UTC day, YYYY-MM-DD').refine((d) => !Number.isNaN(Date.parse(`${d}T00:00:00Z`)), 'not a date');

/** The query of a usage report grouped by one of `keys`. */
const querySchema = <K extends readonly [string, ...string[]]>(keys: K) => z
  .object({ from: Day.optional(), to: Day.optional(), by: z.enum(keys).default('day' as K[number]), owner: z.string().optional() })
  .strict()
  .transform((q) => {
    const to = q.to ?? dayOf(Date.now());
    return { ...q, to, from: q.from ?? dayOf(Date.parse(`${to}T00:00:00Z`) - 29 * DAY_MS) };
  })
  .refine((q) => q.from <= q.to, { message: 'from is after to', path: ['from'] })
  .refine((q) => Date.parse(`${q.to}T00:00:00Z`) - Date.parse(`${q.from}T00:00:00Z`) < MAX_RANGE_DAYS * DAY_MS, {
    message: `at most ${MAX_RANGE_DAYS} days`,
    path: ['from'],
  });

const RunsQuery = querySchema(USAGE_KEYS);
export const BRIDGE_USAGE_KEYS = ['server', 'method', 'day'] as const;
const BridgeQuery = querySchema(BRIDGE_USAGE_KEYS);
const StorageQuery = z.object({ owner: z.string().optional() }).strict();

export const USAGE_COLUMNS = ['key', 'runs', 'input_tokens', 'output_tokens', 'tool_calls', 'errors'] as const;
export const BRIDGE_USAGE_COLUMNS = ['key', 'calls', 'duration_ms'] as const;

export type BridgeUsageRow = { key: string; calls: number; duration_ms: number };


/** The bridge's metered calls summed by `by` (rows sorted by key). */
export function bridgeUsage(rows: readonly BridgeCallRow[], by: (typeof BRIDGE_USAGE_KEYS)[number]): BridgeUsageRow[] {
  const sums = new Map<string, BridgeUsageRow>();
  for (const r of rows) {
    const key = r[by];
    const s = sums.get(key) ?? { key, calls: 0, duration_ms: 0 };
    s.calls += r.calls;
    s.duration_ms += r.duration_ms;
    sums.set(key, s);
  }
  return [...sums.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

type Caller = { admin: boolean; caller: string };

type Refused = { refused: { status: 403 | 422; body: object } };
const ownerIssue = (message: string): Refused => ({ refused: { status: 422, body: { error: 'invalid query', issues: [{ path: 'owner', message }] } } });

/**
 * Whose figures a caller asks for: an owner only its own (another `owner=`: 403); an operator the
 * named owner, or every owner (undefined).
 */
function ownerOf(c: Caller, owner: string | undefined): { owner: string | undefined } | Refused {
  if (!c.admin) {
    if (owner !== undefined && parsePubkey(owner) !== c.caller) return { refused: { status: 403, body: { error: 'only operators may see other owners’ usage' } } };
    return { owner: c.caller };
  }
  const named = owner === undefined ? undefined : parsePubkey(owner);
  return owner !== undefined && named === undefined ? ownerIssue('a 64-hex pubkey or an npub') : { owner: named };
}

/** Like ownerOf, for figures kept per owner: an operator must name the owner. */
function oneOwner(c: Caller, owner: string | undefined): { owner: string } | Refused {
  const whose = ownerOf(c, owner);
  if ('refused' in whose) return whose;
  return whose.owner === undefined ? ownerIssue('operators name the owner (owner=<pubkey>)') : { owner: whose.owner };
}

export function usageRoutes() {
  const app = new Hono<ApiEnv>();
  app.use('*', nip98<UsageApiBindings>(async (env, pubkey) => (isAdmin(env, pubkey) ? undefined : notAnOwner(env, pubkey))));

  const who = (c: { env: UsageApiBindings; get(k: 'caller'): string }): Caller => ({ caller: c.get('caller'), admin: isAdmin(c.env, c.get('caller')) });
  const wantsCsv = (accept: string | undefined): boolean => (accept ?? '').includes('text/csv');
  const csv = { 'Content-Type': 'text/csv; charset=utf-8' };

  app.get('/', async (c) => {
    const parsed = RunsQuery.safeParse(c.req.query());
    if (!parsed.success) return c.json({ error: 'invalid query', issues: issuesOf(parsed.error) }, 422);
    const q = parsed.data;
    const whose = ownerOf(who(c), q.owner);
    if ('refused' in whose) return c.json(whose.refused.body, whose.refused.status);
    const answer = await accountsStub(c.env).usage({ caller: c.get('caller'), owner: whose.owner, from: q.from, to: q.to, by: q.by }, Date.now());
    if (!answer.ok) return c.json({ error: answer.error.error }, 429, { 'Retry-After': String(answer.error.retry_after) });
    const { rows, through } = answer.value;
    const cut: Record<string, string> = through === undefined ? {} : { 'X-Usage-Through': through };
    if (wantsCsv(c.req.header('Accept'))) return c.body(toCsv(USAGE_COLUMNS, rows), 200, { ...csv, ...cut });
    return c.json(through === undefined ? { rows } : { rows, truncated: true, through }, 200, cut);
  });

  app.get('/bridge', async (c) => {
    const parsed = BridgeQuery.safeParse(c.req.query());
    if (!parsed.success) return c.json({ error: 'invalid query', issues: issuesOf(parsed.error) }, 422);
    const q = parsed.data;
    const whose = oneOwner(who(c), q.owner);
    if ('refused' in whose) return c.json(whose.refused.body, whose.refused.status);
    const rows = bridgeUsage(await bridgeStub(c.env, whose.owner).usage(q.from, q.to), q.by);
    return wantsCsv(c.req.header('Accept')) ? c.body(toCsv(BRIDGE_USAGE_COLUMNS, rows), 200, csv) : c.json({ rows });
  });

  app.get('/storage', async (c) => {
    const parsed = StorageQuery.safeParse(c.req.query());
    if (!parsed.success) return c.json({ error: 'invalid query', issues: issuesOf(parsed.error) }, 422);
    const whose = oneOwner(who(c), parsed.data.owner);
    if ('refused' in whose) return c.json(whose.refused.body, whose.refused.status);
    const owner = whose.owner;
    const [stored, account] = await Promise.all([shardStub(c.env, owner).storedUsage(), accountsStub(c.env).snapshot(owner, Date.now())]);
    const plan = staticOwners(c.env).has(owner) ? DEFAULT_PLAN : (account.state?.plan ?? DEFAULT_PLAN);
    const { allowed } = storageLimit(planLimits(c.env, plan).stored_bytes, limitsFromEnv(c.env.RELAY_LIMITS).max_stored_bytes);
    return c.json({ events: stored.events, bytes: stored.bytes, plan, limit_bytes: allowed });
  });

  return app;
}
