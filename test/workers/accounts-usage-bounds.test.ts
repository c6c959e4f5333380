// The Accounts DO's usage aggregate (workers/accounts/accounts-do.ts, table `usage`: one row per
// owner, UTC day, agent, sender and model) is bounded: a stranger's fresh keys cannot add rows
// without end (each agent's first USAGE_SENDERS_PER_AGENT_DAY senders of a day keep their key, the
// runs of further senders are summed under OTHERS), an owner's UTC day holds at most
// USAGE_ROWS_PER_OWNER_DAY rows whatever its agents, senders and models (the rest summed in one
// OTHERS row, the totals exact), a model name is kept to MODEL_NAME_MAX characters, and rows older
// than USAGE_RETENTION_DAYS are pruned, USAGE_PRUNE_PER_RECORD with each recorded run. Runs are
// recorded through the DO's own `record` RPC (what each agent calls after a run); the figures are
// read through GET /api/usage.
// Reading them is bounded too: one query reads at most MAX_USAGE_SCAN rows (past them the answer
// counts the whole days that fit and says so), each caller's queries may cover at most
// USAGE_ROWS_PER_MINUTE rows per minute, and all callers' together USAGE_ROWS_PER_MINUTE_ALL (429
// past them: fresh keys do not multiply the load).
import { env, runInDurableObject, SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import {
  Accounts,
  accountsStub,
  MAX_USAGE_ROWS,
  MAX_USAGE_SCAN,
  OTHERS,
  USAGE_PRUNE_PER_RECORD,
  USAGE_RETENTION_DAYS,
  USAGE_ROWS_PER_MINUTE,
  USAGE_ROWS_PER_MINUTE_ALL,
  USAGE_ROWS_PER_DAY,
  USAGE_ROWS_PER_OWNER_DAY,
  USAGE_SENDERS_PER_AGENT_DAY,
  type RunUsage,
} from '../../workers/accounts/accounts-do.js';
import { MODEL_NAME_MAX } from '../../workers/agent/config.js';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { api } from './api-helpers.js';
import { BASE, keys, randomHex, type Keys } from './helpers.js';
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

/** Reads `sql` in the Accounts object (what the table holds, not what the API answers). */
const stored = <T extends Record<string, SqlStorageValue>>(sql: string, ...args: SqlStorageValue[]) =>
  runInDurableObject(accountsStub(env), (_i, state) => state.storage.sql.exec<T>(sql, ...args).toArray());

const sumOf = (rows: Row[]) => rows.reduce((s, r) => ({ runs: s.runs + r.runs, input_tokens: s.input_tokens + r.input_tokens, output_tokens: s.output_tokens + r.output_tokens }), { runs: 0, input_tokens: 0, output_tokens: 0 });

/** The breakdown rows of `day` the Accounts object counts (`usage_days`), 0 when it has no row. */
const dayCount = async (day: string): Promise<number> => (await stored<{ rows: number }>('SELECT rows FROM usage_days WHERE day = ?', day))[0]?.rows ?? 0;

describe('rows per owner-day and per day', () => {
  it('the limits', () => {
    expect([USAGE_ROWS_PER_OWNER_DAY, USAGE_ROWS_PER_DAY]).toEqual([1_000, 10_000]);
  });

  it('3 agents × 201 fresh senders × 50 models in one UTC day (30,150 runs, each a key of its own) store at most 1,000 rows: the first 999 keys keep theirs, the rest are summed in one "others" row; every total stays exact', async () => {
    const owner = await addOwner();
    const stub = accountsStub(env);
    const now = Date.now();
    const day = dayOf(now);
    const agents = Array.from({ length: 3 }, () => randomHex());
    const models = Array.from({ length: 50 }, (_, i) => `model-${i}`);
    const counted = await dayCount(day);
    // Through the RPC each agent's run report uses, one sender at a time (its 50 models at once).
    for (const agent of agents) {
      for (let s = 0; s < 201; s++) {
        const sender = randomHex();
        await Promise.all(models.map((model) => stub.record({ ...run(owner.pk, agent, sender, now), model })));
      }
    }
    const runs = 3 * 201 * 50;
    const rows = await stored<{ agent: string; sender: string; model: string; runs: number }>('SELECT agent, sender, model, runs FROM usage WHERE owner = ? AND day = ?', owner.pk, day);
    expect(rows.length).toBeLessThanOrEqual(1_000);
    expect(rows).toHaveLength(1_000);
    // 999 rows of one run each (the first agent's first keys: 999 < 201 × 50), and one row summing the rest under "others".
    expect(rows.filter((r) => r.agent !== 'others').every((r) => r.runs === 1 && agents[0] === r.agent)).toBe(true);
    expect(rows.filter((r) => r.agent === 'others')).toEqual([{ agent: 'others', sender: 'others', model: 'others', runs: runs - 999 }]);
    // The day's count of all owners' rows grew by those 999 (an "others" row is not counted).
    expect(await dayCount(day)).toBe(counted + 999);

    // GET /api/usage keeps its shape: by day the figure is exact; by agent, sender or model the runs
    // past the cap are the key "others", and each breakdown still sums to every run.
    const q = (by: string) => rowsOf(owner, `by=${by}&from=${day}&to=${day}`);
    const total = { runs, input_tokens: runs, output_tokens: 2 * runs };
    expect(await q('day')).toEqual([{ key: day, ...total, tool_calls: 0, errors: 0 }]);
    const byAgent = await q('agent');
    expect(byAgent).toEqual([
      { key: agents[0]!, runs: 999, input_tokens: 999, output_tokens: 1998, tool_calls: 0, errors: 0 },
      { key: 'others', runs: runs - 999, input_tokens: runs - 999, output_tokens: 2 * (runs - 999), tool_calls: 0, errors: 0 },
    ].sort((x, y) => (x.key < y.key ? -1 : 1)));
    for (const by of ['sender', 'model']) {
      const breakdown = await q(by);
      expect(sumOf(breakdown)).toEqual(total);
      expect(breakdown.find((r) => r.key === 'others')?.runs).toBe(runs - 999);
    }
    // The plan totals are exact too.
    expect((await stub.snapshot(owner.pk, now)).totals).toMatchObject({ runs_today: runs, tokens_today: 3 * runs });

    // The cap is the owner's: another owner's run that day keeps its row.
    const other = await addOwner();
    await stub.record({ ...run(other.pk, agents[0]!, randomHex(), now), model: 'model-0' });
    expect(await stored('SELECT agent, model, runs FROM usage WHERE owner = ?', other.pk)).toEqual([{ agent: agents[0], model: 'model-0', runs: 1 }]);
  }, 300_000);

  it('all owners’ rows of one UTC day are at most 10,000 (besides each owner’s "others" row): past them a new key of any owner that day is summed in that owner’s "others" row; rows already there keep counting, another day is not affected', async () => {
    const [a, b] = [await addOwner(), await addOwner()];
    const stub = accountsStub(env);
    const now = Date.now();
    const at = now - 3 * DAY_MS; // a report the agent sent again days later
    const day = dayOf(at);
    // 9,999 rows of that day stored already (what other owners' runs made), counted.
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec('INSERT INTO usage_days (day, rows) VALUES (?, ?) ON CONFLICT (day) DO UPDATE SET rows = excluded.rows', day, USAGE_ROWS_PER_DAY - 1);
    });
    const [agentA, agentB, s1, s2, s3] = [randomHex(), randomHex(), randomHex(), randomHex(), randomHex()];
    await stub.record(run(a.pk, agentA, s1, at), now); // the 10,000th: its own row
    await stub.record(run(b.pk, agentB, s2, at), now); // past them: b's "others"
    await stub.record(run(a.pk, agentA, s1, at), now); // a row already there keeps counting
    await stub.record(run(a.pk, agentA, s3, at), now); // a new key of a: a's "others"
    await stub.record(run(b.pk, agentB, s2, now), now); // today has room
    const of = (owner: Keys) => stored('SELECT day, agent, sender, model, runs FROM usage WHERE owner = ? ORDER BY day, agent', owner.pk);
    expect(await of(a)).toEqual(
      [
        { day, agent: agentA, sender: s1, model: 'echo', runs: 2 },
        { day, agent: 'others', sender: 'others', model: 'others', runs: 1 },
      ].sort((x, y) => (x.agent < y.agent ? -1 : 1)),
    );
    expect(await of(b)).toEqual([
      { day, agent: 'others', sender: 'others', model: 'others', runs: 1 },
      { day: dayOf(now), agent: agentB, sender: s2, model: 'echo', runs: 1 },
    ]);
    expect(await dayCount(day)).toBe(USAGE_ROWS_PER_DAY);
    // Every run is counted: by day, each owner's figure is exact.
    expect(await rowsOf(a, `by=day&from=${day}&to=${day}`)).toEqual([dayRow(day, 3)]);
    expect(await rowsOf(b, `by=agent&from=${day}&to=${dayOf(now)}`)).toEqual([dayRow(agentB, 1), dayRow('others', 1)].sort((x, y) => (x.key < y.key ? -1 : 1)));
  });

  it('an Accounts object from before the day counts counts, at wake, the rows of the days a report may still come for (the last 8), not the "others" rows', async () => {
    const pk = keys().pk;
    const now = Date.now();
    const counts = await runInDurableObject(env.ACCOUNTS.get(env.ACCOUNTS.idFromName('accounts-before-usage-days')), (_i, state) => {
      const first = new Accounts(state, env);
      first.add(pk);
      first.record(run(pk, 'a', 's1', now), now);
      first.record(run(pk, 'a', 's2', now), now);
      first.record(run(pk, 'b', 's1', now - 2 * DAY_MS), now);
      first.record(run(pk, 'b', 's1', now - 20 * DAY_MS), now);
      state.storage.sql.exec("INSERT INTO usage (owner, day, agent, sender, model, runs, input_tokens, output_tokens, tool_calls, errors) VALUES (?, ?, 'others', 'others', 'others', 5, 5, 10, 0, 0)", pk, dayOf(now));
      state.storage.sql.exec('DROP TABLE usage_days');
      new Accounts(state, env);
      return state.storage.sql.exec<{ day: string; rows: number }>('SELECT day, rows FROM usage_days ORDER BY day').toArray();
    });
    expect(counts).toEqual([
      { day: dayOf(now - 2 * DAY_MS), rows: 1 },
      { day: dayOf(now), rows: 2 },
    ]);
  });

  it('a model name is stored at most 200 characters long (an agent configured before the limit may report a longer one)', async () => {
    const owner = await addOwner();
    const now = Date.now();
    await accountsStub(env).record({ ...run(owner.pk, randomHex(), randomHex(), now), model: 'm'.repeat(5_000) });
    expect(await stored('SELECT model FROM usage WHERE owner = ?', owner.pk)).toEqual([{ model: 'm'.repeat(MODEL_NAME_MAX) }]);
    expect(MODEL_NAME_MAX).toBe(200);
  });
});

describe('usage aggregate bounds', () => {
  it('the limits', () => {
    expect([USAGE_RETENTION_DAYS, USAGE_SENDERS_PER_AGENT_DAY, USAGE_PRUNE_PER_RECORD, OTHERS]).toEqual([400, 200, 10, 'others']);
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

/** Stores `n` usage rows of `owner` on `day` (one run each, one agent, a sender each), straight into the table. */
const fill = (owner: string, day: string, n: number) =>
  runInDurableObject(accountsStub(env), (_i, state) => {
    state.storage.sql.exec(
      `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
       INSERT INTO usage (owner, day, agent, sender, model, runs, input_tokens, output_tokens, tool_calls, errors)
       SELECT ?, ?, 'agent', printf('%064d', i), 'echo', 1, 1, 2, 0, 0 FROM n`,
      n,
      owner,
      day,
    );
  });

const dayRow = (key: string, runs: number): Row => ({ key, runs, input_tokens: runs, output_tokens: 2 * runs, tool_calls: 0, errors: 0 });

describe('usage queries are bounded', () => {
  it('the limits', () => {
    expect([MAX_USAGE_SCAN, USAGE_ROWS_PER_MINUTE, USAGE_ROWS_PER_MINUTE_ALL]).toEqual([50_000, 200_000, 1_000_000]);
  });

  it('one query reads at most 50,000 rows: past them it counts the whole days that fit (truncated, through), or the first 50,000 rows of a day that alone holds more', async () => {
    const owner = await addOwner();
    const now = Date.now();
    const [d0, d1, d2] = [12, 11, 10].map((back) => dayOf(now - back * DAY_MS));
    await fill(owner.pk, d0!, 10);
    await fill(owner.pk, d1!, MAX_USAGE_SCAN + 1);
    await fill(owner.pk, d2!, 10);
    const get = (query: string) => api(owner.sk, 'GET', `/api/usage?${query}`);

    // d0 fits, d1 does not: d0 alone, said to be cut after it.
    expect(await get(`by=day&from=${d0}&to=${d2}`)).toEqual({ status: 200, json: { rows: [dayRow(d0!, 10)], truncated: true, through: d0 } });
    // From d1, which alone holds more than a query reads: its first 50,000 rows.
    expect(await get(`by=agent&from=${d1}&to=${d2}`)).toEqual({ status: 200, json: { rows: [dayRow('agent', MAX_USAGE_SCAN)], truncated: true, through: d1 } });
    // A range that fits: every row, no marker.
    expect(await get(`by=day&from=${d2}&to=${d2}`)).toEqual({ status: 200, json: { rows: [dayRow(d2!, 10)] } });

    // CSV: the same rows; the cut is in the X-Usage-Through header.
    const url = `${BASE}/api/usage?by=day&from=${d0}&to=${d2}`;
    const csv = await SELF.fetch(url, { headers: { Authorization: makeHttpAuthHeader(owner.sk, url, 'GET'), Accept: 'text/csv' } });
    expect(csv.headers.get('X-Usage-Through')).toBe(d0);
    expect(await csv.text()).toBe(`key,runs,input_tokens,output_tokens,tool_calls,errors\r\n${d0},10,10,20,0,0\r\n`);
    const whole = `${BASE}/api/usage?by=day&from=${d2}&to=${d2}`;
    const fits = await SELF.fetch(whole, { headers: { Authorization: makeHttpAuthHeader(owner.sk, whole, 'GET'), Accept: 'text/csv' } });
    expect(fits.headers.get('X-Usage-Through')).toBeNull();
    await fits.text();
  });

  it('an answer has at most 10,000 rows: past them the keys after the first 9,999 are summed in one "others" row, so every total stays that of by=day', async () => {
    const owner = await addOwner();
    const day = dayOf(Date.now() - 13 * DAY_MS);
    await fill(owner.pk, day, MAX_USAGE_ROWS + 5);
    const rows = await rowsOf(owner, `by=sender&from=${day}&to=${day}`);
    expect(rows).toHaveLength(MAX_USAGE_ROWS);
    expect(rows.filter((r) => r.key === OTHERS)).toEqual([dayRow(OTHERS, 6)]);
    expect(rows.find((r) => r.key === (MAX_USAGE_ROWS - 1).toString().padStart(64, '0'))).toEqual(dayRow((MAX_USAGE_ROWS - 1).toString().padStart(64, '0'), 1));
    expect(sumOf(rows)).toEqual(sumOf(await rowsOf(owner, `by=day&from=${day}&to=${day}`)));
  });

  it('each caller’s queries cover at most 200,000 rows a minute: past them 429 with Retry-After, another caller is still answered, the next minute is too', async () => {
    const owner = await addOwner();
    const other = await addOwner();
    const day = dayOf(Date.now() - 20 * DAY_MS);
    await fill(owner.pk, day, MAX_USAGE_SCAN + 1);
    await fill(other.pk, day, 3);
    const query = `by=sender&from=${day}&to=${day}`;
    // Each of these covers the day's first 50,001 rows (to find the cut; then it sums 50,000): the
    // fifth in the minute would take the caller past 200,000.
    for (let i = 0; i < 4; i++) expect((await api(owner.sk, 'GET', `/api/usage?${query}`)).status).toBe(200);
    const url = `${BASE}/api/usage?${query}`;
    const refused = await SELF.fetch(url, { headers: { Authorization: makeHttpAuthHeader(owner.sk, url, 'GET') } });
    expect(refused.status).toBe(429);
    const retry = Number(refused.headers.get('Retry-After'));
    expect(retry).toBeGreaterThan(0);
    expect(retry).toBeLessThanOrEqual(60);
    expect(await refused.json()).toEqual({ error: `usage queries of this key may read ${USAGE_ROWS_PER_MINUTE} rows a minute; retry in ${retry} s` });
    expect(await api(other.sk, 'GET', `/api/usage?${query}`)).toMatchObject({ status: 200, json: { rows: [{ runs: 1 }, { runs: 1 }, { runs: 1 }] } });
    // A minute later (the Accounts object's RPC, with its clock): answered again.
    const later = await accountsStub(env).usage({ caller: owner.pk, owner: owner.pk, from: day, to: day, by: 'day' }, Date.now() + 61_000);
    expect(later).toEqual({ ok: true, value: { rows: [dayRow(day, MAX_USAGE_SCAN)], through: day } });
  });

  it('all callers’ queries together cover at most 1,000,000 rows a minute: fresh keys, each within its own budget, get 429 past it (another key over HTTP too), the next minute is answered', async () => {
    const owner = await addOwner();
    const day = dayOf(Date.now() - 30 * DAY_MS);
    await fill(owner.pk, day, MAX_USAGE_SCAN + 1);
    const q = (caller: string, now: number) => accountsStub(env).usage({ caller, owner: owner.pk, from: day, to: day, by: 'day' }, now);
    // Each query covers 50,001 rows, each from a key of its own: the twenty-first in the minute at
    // the latest (fewer when the tests before spent some of it) finds the budget spent.
    let answered = 0;
    let refused: { error: string; retry_after: number } | undefined;
    while (refused === undefined && answered <= USAGE_ROWS_PER_MINUTE_ALL / (MAX_USAGE_SCAN + 1)) {
      const r = await q(randomHex(), Date.now());
      if (r.ok) answered++;
      else refused = r.error;
    }
    expect(refused).toBeDefined();
    expect(refused!.error).toBe(`usage queries on this deployment may read ${USAGE_ROWS_PER_MINUTE_ALL} rows a minute in all; retry in ${refused!.retry_after} s`);
    expect(refused!.retry_after).toBeGreaterThan(0);
    expect(refused!.retry_after).toBeLessThanOrEqual(60);
    // Another key, over HTTP: 429 with the same reason and Retry-After.
    const url = `${BASE}/api/usage?by=day&from=${day}&to=${day}`;
    const res = await SELF.fetch(url, { headers: { Authorization: makeHttpAuthHeader(owner.sk, url, 'GET') } });
    expect(res.status).toBe(429);
    const retry = Number(res.headers.get('Retry-After'));
    expect(await res.json()).toEqual({ error: `usage queries on this deployment may read ${USAGE_ROWS_PER_MINUTE_ALL} rows a minute in all; retry in ${retry} s` });
    // Once the window is over (the test before began one a minute ahead): answered again.
    expect(await q(randomHex(), Date.now() + 2 * 61_000)).toEqual({ ok: true, value: { rows: [dayRow(day, MAX_USAGE_SCAN)], through: day } });
  });
});


describe('the plan totals each run report answers', () => {
  const snapshotOf = async (owner: string, at: number) => (await accountsStub(env).record(run(owner, randomHex(), randomHex(), at), at)).totals;

  it('are the sums of the owner’s runs today and this month, kept per day (owner_days), whatever the agents, senders and models', async () => {
    const owner = await addOwner();
    const now = Date.now();
    const monthStart = Date.parse(`${dayOf(now).slice(0, 7)}-01T00:00:00Z`);
    const earlier = now - monthStart >= DAY_MS ? monthStart : undefined; // a day of this month before today, if there is one
    await snapshotOf(owner.pk, monthStart - DAY_MS); // last month: not counted
    if (earlier !== undefined) await snapshotOf(owner.pk, earlier);
    for (let i = 0; i < 3; i++) await snapshotOf(owner.pk, now);
    const totals = await snapshotOf(owner.pk, now);
    const month = (earlier !== undefined ? 1 : 0) + 4;
    expect(totals).toEqual({ day: dayOf(now), runs_today: 4, tokens_today: 12, tokens_month: 3 * month });
    const days = await runInDurableObject(accountsStub(env), (_i, state) =>
      state.storage.sql.exec<{ day: string; runs: number; tokens: number }>('SELECT day, runs, tokens FROM owner_days WHERE owner = ? ORDER BY day', owner.pk).toArray(),
    );
    expect(days.at(-1)).toEqual({ day: dayOf(now), runs: 4, tokens: 12 });
    expect(days).toHaveLength(earlier !== undefined ? 3 : 2);
  });

  it('read one row per day, not the usage rows: 20,000 rows of one day (of agents, senders and models) cost a report nothing more', async () => {
    const owner = await addOwner();
    const now = Date.now();
    await fill(owner.pk, dayOf(now), 20_000); // straight into `usage`, so owner_days does not know them
    expect(await snapshotOf(owner.pk, now)).toEqual({ day: dayOf(now), runs_today: 1, tokens_today: 3, tokens_month: 3 });
  });

  it('an Accounts object from before owner_days fills it once from usage at wake', async () => {
    const pk = keys().pk;
    const now = Date.now();
    const totals = await runInDurableObject(env.ACCOUNTS.get(env.ACCOUNTS.idFromName('accounts-before-owner-days')), (_i, state) => {
      const first = new Accounts(state, env);
      first.add(pk);
      first.record(run(pk, 'a', 's1', now), now);
      first.record(run(pk, 'b', 's2', now), now);
      state.storage.sql.exec('DROP TABLE owner_days');
      return new Accounts(state, env).snapshot(pk, now).totals;
    });
    expect(totals).toEqual({ day: dayOf(now), runs_today: 2, tokens_today: 6, tokens_month: 6 });
  });

  it('days older than USAGE_RETENTION_DAYS leave owner_days with the usage rows', async () => {
    const owner = await addOwner();
    const now = Date.now();
    await snapshotOf(owner.pk, now - (USAGE_RETENTION_DAYS + 2) * DAY_MS);
    const before = await runInDurableObject(accountsStub(env), (_i, state) => state.storage.sql.exec<{ n: number }>('SELECT count(*) AS n FROM owner_days WHERE owner = ?', owner.pk).one().n);
    expect(before).toBe(1);
    for (let i = 0; i < 30; i++) await snapshotOf(keys().pk, now); // each report prunes a few expired rows
    const after = await runInDurableObject(accountsStub(env), (_i, state) => state.storage.sql.exec<{ day: string }>('SELECT day FROM owner_days WHERE owner = ?', owner.pk).toArray());
    expect(after).toEqual([]);
  });
});
