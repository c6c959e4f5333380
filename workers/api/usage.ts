// Usage figures (GET /api/usage?from=&to=&by=agent|sender|model|day), NIP-98 authenticated: an
// owner sees its own agents' runs, an operator (EDGESTR_ADMINS) every owner's (or one, with
// `owner=`). Figures come from the Accounts DO's per-owner aggregate (runs summed per UTC day,
// agent, sender and model), so `from` and `to` are UTC days (YYYY-MM-DD, inclusive; default: the
// last 30 days), at most MAX_RANGE_DAYS apart. JSON `{rows}` or, with `Accept: text/csv`, CSV.

import { Hono } from 'hono';
import { z } from 'zod';
import { parsePubkey } from '../../src/shared/keys.js';
import { accountsStub, USAGE_KEYS, type AccountsBindings, type UsageRow } from '../accounts/accounts-do.js';
import { isAdmin, notAnOwner, type OwnerEnv } from '../common/owners.js';
import type { ShardBindings } from '../common/shards.js';
import { issuesOf } from './agents.js';
import type { ApiStateBindings } from './api-state.js';
import { nip98, type AuthedVariables } from './nip98-auth.js';

export interface UsageApiBindings extends ApiStateBindings, AccountsBindings, ShardBindings, OwnerEnv {}

type ApiEnv = { Bindings: UsageApiBindings; Variables: AuthedVariables };

export const MAX_RANGE_DAYS = 366;
const DAY_MS = 86_400_000;
const dayOf = (ms: number): string => new Date(ms).toISOString().slice(0, 10);
const Day = z.string().regex(/^\d{4}-\d{2}-\d{2}$/, 'a UTC day, YYYY-MM-DD').refine((d) => !Number.isNaN(Date.parse(`${d}T00:00:00Z`)), 'not a date');

const QuerySchema = z
  .object({ from: Day.optional(), to: Day.optional(), by: z.enum(USAGE_KEYS).default('day'), owner: z.string().optional() })
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

export const USAGE_COLUMNS = ['key', 'runs', 'input_tokens', 'output_tokens', 'tool_calls', 'errors'] as const;

const csvField = (v: string | number): string => (typeof v === 'number' || !/[",\r\n]/.test(v) ? String(v) : `"${v.replaceAll('"', '""')}"`);

/** The rows as CSV (RFC 4180, a header line, CRLF line ends). */
export const usageCsv = (rows: UsageRow[]): string =>
  [USAGE_COLUMNS.join(','), ...rows.map((r) => USAGE_COLUMNS.map((k) => csvField(r[k])).join(','))].map((l) => `${l}\r\n`).join('');

export function usageRoutes() {
  const app = new Hono<ApiEnv>();
  app.use('*', nip98<UsageApiBindings>(async (env, pubkey) => (isAdmin(env, pubkey) ? undefined : notAnOwner(env, pubkey))));

  app.get('/', async (c) => {
    const caller = c.get('caller');
    const parsed = QuerySchema.safeParse(c.req.query());
    if (!parsed.success) return c.json({ error: 'invalid query', issues: issuesOf(parsed.error) }, 422);
    const q = parsed.data;
    let owner: string | undefined = caller;
    if (isAdmin(c.env, caller)) {
      owner = q.owner === undefined ? undefined : parsePubkey(q.owner);
      if (q.owner !== undefined && owner === undefined) return c.json({ error: 'invalid query', issues: [{ path: 'owner', message: 'a 64-hex pubkey or an npub' }] }, 422);
    } else if (q.owner !== undefined && parsePubkey(q.owner) !== caller) {
      return c.json({ error: 'only operators may see other owners’ usage' }, 403);
    }
    const rows = await accountsStub(c.env).usage(owner, q.from, q.to, q.by);
    if ((c.req.header('Accept') ?? '').includes('text/csv')) {
      return c.body(usageCsv(rows), 200, { 'Content-Type': 'text/csv; charset=utf-8' });
    }
    return c.json({ rows });
  });

  return app;
}
