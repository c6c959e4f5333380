// The agent's runs not reported to Accounts yet, counted on top of its owner's totals
// (workers/agent/metering.ts unreportedTotals, owner-copy.ts): kept as running sums per UTC day,
// updated in the same transaction as the rows (record, markReported, prune), so reading them costs
// a row per day of the month however many runs wait (after Accounts failed for a while, tens of
// thousands); and a prompt's admission reads them only once its sender passed the block and allow
// lists (admission.ts), so a stranger's prompts from fresh keys cost no scan. Before, each prompt,
// DVMCP ask and model call aggregated every unreported row of the month, a blocked key's too.
// The sums are checked against a full recount over random sequences of records, reports and
// prunes (fast-check), and against the rows an agent stored before the sums existed (backfilled).
import { env, runInDurableObject } from 'cloudflare:test';
import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import type { OwnerTotals } from '../../workers/accounts/accounts-do.js';
import { UsageMeter, type RunMeter } from '../../workers/agent/metering.js';
import { admitSender } from '../../workers/agent/admission.js';
import { AgentBudget } from '../../workers/agent/budget.js';
import { DEFAULT_LIMITS } from '../../workers/agent/config.js';
import { api } from './api-helpers.js';
import { NipXxClient } from './agent-helpers.js';
import { keys, randomHex, type Keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';
import { meteredSql } from './metered-sql.js';
import { PROP } from '../support/prop.js';

const stubOf = (agent: string) => env.AGENT.get(env.AGENT.idFromName(agent));
const DAY_MS = 86_400_000;

const run = (run_id: string, tokens: number): RunMeter => ({
  run_id,
  sender: 'b'.repeat(64),
  provider: 'echo',
  model: 'echo',
  input_tokens: tokens,
  output_tokens: 1,
  tool_calls: 0,
  duration_ms: 5,
  outcome: 'response',
});

/** The totals by a full scan of the rows (what unreportedTotals computed before the sums). */
function recount(sql: SqlStorage, now: number): OwnerTotals {
  const day = new Date(now).toISOString().slice(0, 10);
  const dayStart = Date.parse(`${day}T00:00:00Z`);
  const monthStart = Date.parse(`${day.slice(0, 7)}-01T00:00:00Z`);
  const r = sql
    .exec<Omit<OwnerTotals, 'day'>>(
      `SELECT count(CASE WHEN at >= ? THEN 1 END) AS runs_today, coalesce(sum(CASE WHEN at >= ? THEN input_tokens + output_tokens END), 0) AS tokens_today,
              coalesce(sum(input_tokens + output_tokens), 0) AS tokens_month
       FROM run_usage WHERE reported = 0 AND at >= ?`,
      dayStart,
      dayStart,
      monthStart,
    )
    .one();
  return { day, ...r };
}

/** Empties every table of the object (as Agent.forgetEverything does). */
function emptyTables(sql: SqlStorage): void {
  const tables = sql.exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%'").toArray();
  for (const { name } of tables) sql.exec(`DELETE FROM "${name}"`);
}

/** The rows SQLite read for the statements the agent's object ran between `start` and `stop` (exec shadowed on its SqlStorage: cursor.rowsRead). */
const metered = new Map<string, SqlStorageCursor<Record<string, SqlStorageValue>>[]>();
async function startMetering(agent: string): Promise<void> {
  await runInDurableObject(stubOf(agent), (_i, state) => {
    const sql = state.storage.sql;
    const exec = Object.getPrototypeOf(sql).exec as SqlStorage['exec'];
    const cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
    metered.set(agent, cursors);
    Object.defineProperty(sql, 'exec', {
      configurable: true,
      value: <T extends Record<string, SqlStorageValue>>(query: string, ...bindings: unknown[]) => {
        const cursor = exec.call(sql, query, ...bindings) as SqlStorageCursor<T>;
        cursors.push(cursor as unknown as SqlStorageCursor<Record<string, SqlStorageValue>>);
        return cursor;
      },
    });
  });
}
async function stopMetering(agent: string): Promise<{ rows: number; statements: number }> {
  return runInDurableObject(stubOf(agent), (_i, state) => {
    delete (state.storage.sql as unknown as Record<string, unknown>)['exec'];
    const cursors = metered.get(agent) ?? [];
    return { rows: cursors.reduce((n, c) => n + c.rowsRead, 0), statements: cursors.length };
  });
}

async function agentOfNewOwner(body: object): Promise<{ owner: Keys; agent: string }> {
  const owner = keys();
  expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk })).status).toBe(201);
  const r = await api(owner.sk, 'POST', '/api/agents', { name: 'metered agent', provider: 'echo', ...body });
  expect(r.status).toBe(201);
  return { owner, agent: (r.json as { pubkey: string }).pubkey };
}

describe('the runs not reported yet, as the owner’s totals count them', () => {
  it('with 10,000 runs waiting, a blocked key’s prompt is answered BLOCKED_SENDER and its admission reads a few rows, not the runs', { timeout: 60_000 }, async () => {
    const blocked = keys();
    const { owner, agent } = await agentOfNewOwner({ block: [blocked.pk] });
    const client = await NipXxClient.open(agent, blocked, `/r/${owner.pk}`);
    // Its first watchdog pass (due 10 ms after the creation) has ended: it set the next one.
    await vi.waitFor(async () => expect(await runInDurableObject(stubOf(agent), (_i, state) => state.storage.getAlarm())).toBeGreaterThan(Date.now() + 5_000), { timeout: 10_000, interval: 50 });
    // Accounts did not take the agent's last 10,000 runs (as after it was full for a while); the
    // watchdog, which would send them again, does not run meanwhile.
    const waiting = await runInDurableObject(stubOf(agent), async (_i, state) => {
      await state.storage.deleteAlarm();
      const meter = new UsageMeter(state.storage);
      const now = Date.now();
      for (let i = 0; i < 10_000; i++) meter.record(run(`seeded-${i}`, 10), now - i);
      return { totals: meter.unreportedTotals(now), recount: recount(state.storage.sql, now) };
    });
    expect(waiting.totals).toEqual(waiting.recount);
    expect(waiting.totals.runs_today + waiting.totals.tokens_month).toBeGreaterThan(0);

    await startMetering(agent);
    const prompt = client.prompt({ ver: 1, message: 'from a blocked key' });
    await client.send(prompt);
    const answered = (await client.collect(prompt.id)).terminal.payload;
    const read = await stopMetering(agent);
    expect(answered).toMatchObject({ code: 'BLOCKED_SENDER', message: 'this sender is blocked by the agent’s policy' });
    expect(read.statements).toBeGreaterThan(0);
    // Before: the admission aggregated every unreported row of the month (10,000 and more read).
    expect(read.rows).toBeLessThan(50);
  });

  it('admission asks for the owner’s plan quota only once the sender passed the block and allow lists', async () => {
    const asked = await runInDurableObject(env.AGENT.get(env.AGENT.newUniqueId()), (_i, state) => {
      const budget = new AgentBudget(state.storage.sql);
      let quotas = 0;
      const quota = () => {
        quotas++;
        return undefined;
      };
      const config = { owner: 'd'.repeat(64), block: ['b'.repeat(64)], allow: ['a'.repeat(64)], limits: DEFAULT_LIMITS };
      const verdicts = ['b', 'c', 'a'].map((c) => admitSender(c.repeat(64), config, { owner: 'allowed', quota, activeRuns: 0, now: Date.now(), budget }, 'run'));
      return { verdicts: verdicts.map((v) => (v.verdict === 'answer' ? v.refusal.code : v.verdict)), quotas };
    });
    // The blocked key and the key not on the allowlist: refused, no quota computed; the allowed key: one.
    expect(asked).toEqual({ verdicts: ['BLOCKED_SENDER', 'UNAUTHORIZED', 'run'], quotas: 1 });
  });

  it('reading the totals reads a row per day, not per run', async () => {
    const stub = env.AGENT.get(env.AGENT.newUniqueId());
    const read = await runInDurableObject(stub, (_i, state) => {
      const meter = new UsageMeter(state.storage);
      const now = Date.UTC(2026, 4, 20, 12);
      // 2,000 runs over the last 20 days.
      for (let i = 0; i < 2_000; i++) meter.record(run(`r${i}`, 3), now - (i % 20) * DAY_MS);
      const metered = meteredSql(state.storage.sql);
      const reader = new UsageMeter({ sql: metered.sql, transactionSync: (f) => state.storage.transactionSync(f) });
      metered.read();
      const totals = reader.unreportedTotals(now);
      return { totals, recount: recount(state.storage.sql, now), rows: metered.read() };
    });
    expect(read.totals).toEqual(read.recount);
    expect(read.totals).toEqual({ day: '2026-05-20', runs_today: 100, tokens_today: 400, tokens_month: 20 * 100 * 4 });
    // Before: the 2,000 rows (and as many index entries).
    expect(read.rows).toBeLessThanOrEqual(40);
  });

  it('the sums equal a full recount after any sequence of records, reports and prunes (fast-check)', async () => {
    const stub = env.AGENT.get(env.AGENT.newUniqueId());
    const T0 = Date.UTC(2026, 2, 30, 6);
    const op = fc.oneof(
      // A run recorded (a new one, or one recorded before again) some days before or after T0.
      fc.record({ kind: fc.constant('record' as const), id: fc.nat(30), tokens: fc.nat(500), day: fc.integer({ min: -100, max: 5 }), ms: fc.nat(DAY_MS - 1) }),
      fc.record({ kind: fc.constant('report' as const), id: fc.nat(30) }),
      fc.record({ kind: fc.constant('prune' as const), day: fc.integer({ min: -5, max: 10 }), batch: fc.integer({ min: 1, max: 10 }) }),
    );
    await runInDurableObject(stub, (_i, state) => {
      const sql = state.storage.sql;
      fc.assert(
        fc.property(fc.array(op, { maxLength: 60 }), fc.array(fc.integer({ min: -40, max: 10 }), { minLength: 1, maxLength: 4 }), (ops, nows) => {
          emptyTables(sql);
          const meter = new UsageMeter(state.storage);
          for (const o of ops) {
            if (o.kind === 'record') meter.record(run(`run-${o.id}`, o.tokens), T0 + o.day * DAY_MS + o.ms);
            else if (o.kind === 'report') meter.markReported(`run-${o.id}`);
            else meter.prune(T0 + o.day * DAY_MS, o.batch);
          }
          for (const d of nows) {
            const now = T0 + d * DAY_MS;
            expect(meter.unreportedTotals(now)).toEqual(recount(sql, now));
          }
        }),
        { ...PROP, numRuns: 100 },
      );
    });
  });

  it('an agent stored before the sums existed: its unreported rows are summed once, when the object starts', async () => {
    const stub = env.AGENT.get(env.AGENT.newUniqueId());
    const now = Date.UTC(2026, 6, 15, 18);
    const got = await runInDurableObject(stub, (_i, state) => {
      const sql = state.storage.sql;
      new UsageMeter(state.storage);
      emptyTables(sql);
      const insert = (id: string, at: number, tokens: number, reported: 0 | 1) =>
        sql.exec(
          "INSERT INTO run_usage (run_id, at, sender, provider, model, input_tokens, output_tokens, tool_calls, duration_ms, outcome, estimated, reported) VALUES (?, ?, 's', 'echo', 'echo', ?, 0, 0, 1, 'response', 0, ?)",
          id,
          at,
          tokens,
          reported,
        );
      for (let i = 0; i < 50; i++) insert(randomHex(8), now - (i % 25) * DAY_MS - i * 1000, 7 + i, i % 3 === 0 ? 1 : 0);
      // As stored before the sums: no table of them.
      for (const { name } of sql.exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT IN ('run_usage', 'run_spend') AND name LIKE '%unreported%'").toArray()) {
        sql.exec(`DROP TABLE "${name}"`);
      }
      const meter = new UsageMeter(state.storage);
      const first = [meter.unreportedTotals(now), recount(sql, now)];
      // Once: a second start does not add them again.
      const again = new UsageMeter(state.storage).unreportedTotals(now);
      return { first, again };
    });
    expect(got.first[0]).toEqual(got.first[1]);
    expect(got.first[0]!.tokens_month).toBeGreaterThan(0);
    expect(got.again).toEqual(got.first[1]);
  });
});
