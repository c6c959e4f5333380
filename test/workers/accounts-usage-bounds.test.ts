// The Accounts DO's usage aggregate (workers/accounts/accounts-do.ts, table `usage`: one row per
// owner, UTC day, agent, sender and model) is bounded: a stranger's fresh keys cannot add rows
// without end (each agent's first USAGE_SENDERS_PER_AGENT_DAY senders of a day keep their key, the
// runs of further senders are summed under OTHER_SENDERS), and rows older than USAGE_RETENTION_DAYS
// are pruned, USAGE_PRUNE_PER_RECORD with each recorded run. Runs are recorded through the DO's own
// `record` RPC (what each agent calls after a run); the figures are read through GET /api/usage.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { accountsStub, OTHER_SENDERS, USAGE_PRUNE_PER_RECORD, USAGE_RETENTION_DAYS, USAGE_SENDERS_PER_AGENT_DAY, type RunUsage } from '../../workers/accounts/accounts-do.js';
import { api } from './api-helpers.js';
import { keys, randomHex, type Keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

const DAY_MS = 86_400_000;
const dayOf = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

async function addOwner(): Promise<Keys> {
  const k = keys();
  expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: k.pk })).status).toBe(201);
  return k;
}

const run = (owner: string, agent: string, sender: string, at: number): RunUsage => ({
  owner,
  agent,
  run_id: randomHex(),
  sender,
  model: 'echo',
  at,
  input_tokens: 1,
  output_tokens: 2,
  tool_calls: 0,
  error: false,
});

type Row = { key: string; runs: number; input_tokens: number; output_tokens: number; tool_calls: number; errors: number };
const rowsOf = async (owner: Keys, query: string): Promise<Row[]> => {
  const r = await api(owner.sk, 'GET', `/api/usage?${query}`);
  expect(r.status).toBe(200);
  return (r.json as { rows: Row[] }).rows;
};

describe('usage aggregate bounds', () => {
  it('the limits', () => {
    expect([USAGE_RETENTION_DAYS, USAGE_SENDERS_PER_AGENT_DAY, USAGE_PRUNE_PER_RECORD, OTHER_SENDERS]).toEqual([400, 200, 10, 'others']);
  });

  it('an agent’s first 200 senders of a UTC day keep their key; the runs of further senders are summed under "others"', async () => {
    const owner = await addOwner();
    const a1 = randomHex();
    const a2 = randomHex();
    const stub = accountsStub(env);
    const now = Date.now();
    const yesterday = now - DAY_MS;
    const senders = Array.from({ length: 205 }, () => randomHex());
    for (const s of senders) await stub.record(run(owner.pk, a1, s, yesterday));
    // A sender already listed that day keeps its row; another agent has its own 200; a new day starts afresh.
    await stub.record(run(owner.pk, a1, senders[0]!, yesterday));
    const other = randomHex();
    await stub.record(run(owner.pk, a2, other, yesterday));
    const fresh = randomHex();
    await stub.record(run(owner.pk, a1, fresh, now));

    const day1 = dayOf(yesterday);
    const bySender = await rowsOf(owner, `by=sender&from=${day1}&to=${day1}`);
    const row = (key: string, runs: number): Row => ({ key, runs, input_tokens: runs, output_tokens: 2 * runs, tool_calls: 0, errors: 0 });
    const want = [...senders.slice(0, 200).map((s, i) => row(s, i === 0 ? 2 : 1)), row(other, 1), row('others', 5)].sort((x, y) => (x.key < y.key ? -1 : 1));
    expect(bySender).toEqual(want);
    // Folding keeps the totals: every run is counted.
    expect(await rowsOf(owner, `by=agent&from=${day1}&to=${day1}`)).toEqual([row(a1, 206), row(a2, 1)].sort((x, y) => (x.key < y.key ? -1 : 1)));
    expect(await rowsOf(owner, `by=sender&from=${dayOf(now)}&to=${dayOf(now)}`)).toEqual([row(fresh, 1)]);
    // The table holds the 200 senders, "others", the other agent's sender and today's: 203 rows for 208 runs.
    const stored = await runInDurableObject(stub, (_i, state) => state.storage.sql.exec<{ n: number }>('SELECT COUNT(*) AS n FROM usage WHERE owner = ?', owner.pk).one().n);
    expect(stored).toBe(203);
  });

  it('rows older than 400 days are pruned, oldest first, 10 with each recorded run', async () => {
    const owner = await addOwner();
    const agent = randomHex();
    const now = Date.now();
    const expired = dayOf(now - 401 * DAY_MS);
    const kept = dayOf(now - 399 * DAY_MS);
    const stub = accountsStub(env);
    await runInDurableObject(stub, (_i, state) => {
      const insert = (day: string) =>
        state.storage.sql.exec('INSERT INTO usage (owner, day, agent, sender, model, runs, input_tokens, output_tokens, tool_calls, errors) VALUES (?, ?, ?, ?, ?, 1, 1, 2, 0, 0)', owner.pk, day, agent, randomHex(), 'echo');
      for (let i = 0; i < 15; i++) insert(expired);
      for (let i = 0; i < 3; i++) insert(kept);
    });
    const range = `by=day&from=${expired}&to=${dayOf(now - 40 * DAY_MS)}`;
    const day = (key: string, runs: number): Row => ({ key, runs, input_tokens: runs, output_tokens: 2 * runs, tool_calls: 0, errors: 0 });
    expect(await rowsOf(owner, range)).toEqual([day(expired, 15), day(kept, 3)]);
    await stub.record(run(owner.pk, agent, randomHex(), now));
    expect(await rowsOf(owner, range)).toEqual([day(expired, 5), day(kept, 3)]);
    await stub.record(run(owner.pk, agent, randomHex(), now));
    expect(await rowsOf(owner, range)).toEqual([day(kept, 3)]);
    expect(await rowsOf(owner, `by=day&from=${dayOf(now)}&to=${dayOf(now)}`)).toEqual([day(dayOf(now), 2)]);
  });
});
