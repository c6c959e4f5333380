// The owner's usage in the console: the runs of the caller's agents over the last 30 days by agent
// (GET /api/usage?by=agent; an answer the API cut says through which day) as the table **Usage**, the shard's storage (GET /api/usage/storage) and
// the bridge's calls (GET /api/usage/bridge?by=server) as a summary line, and the plan figures the
// owner's NIP-AO session_resolved frames carry (owner_usage). Every call is signed NIP-98 by the
// signed-in key, so this works with a NIP-07 extension too.

import { z } from 'zod';
import { api } from './api.js';
import { byId, el, short } from './dom.js';
import type { Signer } from './signer.js';
import { USAGE_OTHERS } from '../shared/usage-keys.js';

const RunRowSchema = z.object({ key: z.string(), runs: z.number(), input_tokens: z.number(), output_tokens: z.number(), tool_calls: z.number(), errors: z.number() });
const RunsSchema = z.object({ rows: z.array(RunRowSchema), truncated: z.literal(true).optional(), through: z.string().optional() });

/** How a row of the by-agent table is named: an agent by `names`, the row of runs summed past the usage table's row limits as such. */
export const usageRowLabel = (key: string, names: (pubkey: string) => string): string =>
  key === USAGE_OTHERS ? 'others (runs summed past the day’s row limits)' : names(key);

/** The summary's period: the last 30 days, or through which day they were counted when the API cut its answer. */
export const usagePeriod = (r: z.infer<typeof RunsSchema>): string =>
  r.truncated && r.through ? `last 30 days, counted through ${r.through} only (more runs than one query reads; later days left out)` : 'last 30 days';
const StorageSchema = z.object({ events: z.number(), bytes: z.number(), plan: z.string(), limit_bytes: z.number().optional() });
const BridgeSchema = z.object({ rows: z.array(z.object({ key: z.string(), calls: z.number(), duration_ms: z.number() })) });

/** The owner's totals against its plan, as a session_resolved frame carries them (workers/accounts/quota.ts OwnerUsage). */
export const OwnerUsageSchema = z.object({
  plan: z.string(),
  day: z.string(),
  runs_today: z.number(),
  tokens_today: z.number(),
  tokens_month: z.number(),
  limits: z.object({ runs_per_day: z.number().optional(), tokens_per_day: z.number().optional(), tokens_per_month: z.number().optional() }),
});
export type OwnerUsage = z.infer<typeof OwnerUsageSchema>;

/** One run's usage, as a session_resolved frame carries it. */
export const RunUsageSchema = z.object({ model: z.string(), input_tokens: z.number(), output_tokens: z.number(), tool_calls: z.number(), duration_ms: z.number() });

const of = (used: number, limit: number | undefined): string => (limit === undefined ? used.toLocaleString('en') : `${used.toLocaleString('en')} of ${limit.toLocaleString('en')}`);

/** "today: 3 of 10 runs · 1,200 tokens · this month 9,000 of 50,000 tokens (plan pro)". */
export const planLine = (u: OwnerUsage): string =>
  `today: ${of(u.runs_today, u.limits.runs_per_day)} runs · ${of(u.tokens_today, u.limits.tokens_per_day)} tokens · this month ${of(u.tokens_month, u.limits.tokens_per_month)} tokens (plan ${u.plan})`;

export class UsagePanel {
  readonly #signer: Signer;
  readonly #rows = byId('usage-rows');
  readonly #summary = byId('usage-summary');
  readonly #plan = byId('usage-plan');
  #names: (pubkey: string) => string = short;
  #pending: ReturnType<typeof setTimeout> | undefined;

  constructor(signer: Signer) {
    this.#signer = signer;
    byId('usage-refresh').addEventListener('click', () => void this.refresh());
  }

  /** How agents are named in the table (the owner panel knows their names). */
  set names(f: (pubkey: string) => string) {
    this.#names = f;
  }

  /** The plan figures of the latest session_resolved frame, then a refresh of the tables soon after (runs finishing together make one). */
  runFinished(owner: OwnerUsage | undefined): void {
    if (owner) this.#plan.textContent = planLine(owner);
    clearTimeout(this.#pending);
    this.#pending = setTimeout(() => void this.refresh(), 500);
  }

  async refresh(): Promise<void> {
    const [runs, storage, bridge] = await Promise.all([
      api(this.#signer, 'GET', '/api/usage?by=agent'),
      api(this.#signer, 'GET', '/api/usage/storage'),
      api(this.#signer, 'GET', '/api/usage/bridge?by=server'),
    ]);
    const r = runs.ok ? RunsSchema.safeParse(runs.json) : undefined;
    if (!runs.ok) this.#summary.textContent = `usage unavailable: ${runs.message}`;
    else if (!r?.success) this.#summary.textContent = 'usage unavailable: /api/usage answered an unexpected shape';
    else {
      this.#rows.replaceChildren(
        ...r.data.rows.map((row) => {
          const tr = el('tr');
          const th = el('th', undefined, usageRowLabel(row.key, this.#names));
          th.scope = 'row';
          tr.append(th);
          for (const n of [row.runs, row.input_tokens, row.output_tokens, row.tool_calls, row.errors]) tr.append(el('td', undefined, n.toLocaleString('en')));
          return tr;
        }),
      );
      if (r.data.rows.length === 0) {
        const tr = el('tr');
        const td = el('td', undefined, 'No runs in the last 30 days.');
        td.colSpan = 6;
        tr.append(td);
        this.#rows.append(tr);
      }
      const parts: string[] = [];
      const s = storage.ok ? StorageSchema.safeParse(storage.json) : undefined;
      if (s?.success) parts.push(`stored: ${s.data.events.toLocaleString('en')} events, ${of(s.data.bytes, s.data.limit_bytes)} bytes (plan ${s.data.plan})`);
      else parts.push(`stored: unavailable${storage.ok ? '' : ` (${storage.message})`}`);
      const b = bridge.ok ? BridgeSchema.safeParse(bridge.json) : undefined;
      if (b?.success) parts.push(`bridge calls: ${b.data.rows.reduce((n, x) => n + x.calls, 0).toLocaleString('en')}`);
      this.#summary.textContent = `${usagePeriod(r.data)} · ${parts.join(' · ')}`;
    }
  }
}
