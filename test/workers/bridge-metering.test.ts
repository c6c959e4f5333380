// The bridge's metering rows (bridge_calls, workers/bridge/metering.ts) are kept RETENTION_DAYS and
// pruned in bounded batches: a few with each recorded call, up to PRUNE_BATCH by the watchdog
// alarm, so that a bridge idle for months does not delete its whole backlog in one statement. A
// bridge with no server books no alarm (bridge-idle.test.ts): its rows past RETENTION_DAYS are not
// pruned then, and are not answered either.
import { env, runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import type { Bridge } from '../../workers/bridge/bridge-do.js';
import { BridgeMeter, METER_PRUNE_BATCH, RETENTION_DAYS } from '../../workers/bridge/metering.js';
import { directBridge } from './bridge-helpers.js';

const DAY_MS = 86_400_000;
const dayOf = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

describe('bridge metering retention', () => {
  it('rows older than RETENTION_DAYS go, two with each recorded call and up to METER_PRUNE_BATCH per watchdog alarm; newer rows stay', async () => {
    expect([RETENTION_DAYS, METER_PRUNE_BATCH]).toEqual([90, 500]);
    const { owner } = await directBridge([]);
    const stub = env.BRIDGE.get(env.BRIDGE.idFromName(owner));
    await runInDurableObject(stub, async (i, state) => {
      const instance = i as Bridge;
      const sql = state.storage.sql;
      const meter = new BridgeMeter(sql, () => []); // (no invoice open)
      const now = Date.now();
      // 600 rows from 100 to 399 days ago (two servers a day), and one a day for the last 30 days.
      for (let d = 100; d < 400; d++) {
        for (const server of ['a', 'b']) sql.exec('INSERT INTO bridge_calls (day, server, method, calls, duration_ms) VALUES (?, ?, ?, 1, 0)', dayOf(now - d * DAY_MS), server, 'tools/call');
      }
      for (let d = 0; d < 30; d++) sql.exec('INSERT INTO bridge_calls (day, server, method, calls, duration_ms) VALUES (?, ?, ?, 1, 0)', dayOf(now - d * DAY_MS), 'a', 'tools/list');
      const old = (): number => sql.exec<{ n: number }>('SELECT COUNT(*) AS n FROM bridge_calls WHERE day < ?', dayOf(now - RETENTION_DAYS * DAY_MS)).one().n;
      const recent = (): number => sql.exec<{ n: number }>('SELECT COUNT(*) AS n FROM bridge_calls WHERE day >= ?', dayOf(now - RETENTION_DAYS * DAY_MS)).one().n;

      // Others' day counts of earlier days go too (nothing reads them).
      for (let d = 1; d <= 3; d++) sql.exec('INSERT INTO bridge_others (day, calls) VALUES (?, 5)', dayOf(now - d * DAY_MS));
      meter.hold(['a'], 'tools/call', true, now).upstream(now);
      expect(old()).toBe(598);
      expect(sql.exec<{ day: string; calls: number }>('SELECT day, calls FROM bridge_others').toArray()).toEqual([{ day: dayOf(now - DAY_MS), calls: 5 }, { day: dayOf(now), calls: 1 }]);
      await instance.alarm();
      expect(old()).toBe(98);
      await instance.alarm();
      expect(old()).toBe(0);
      expect(recent()).toBe(31); // the 30 days, and today's tools/call
      expect(sql.exec<{ day: string; calls: number }>('SELECT day, calls FROM bridge_others').toArray()).toEqual([{ day: dayOf(now), calls: 1 }]);
    });
  });

  it('a bridge with no alarm (no server) answers no row older than RETENTION_DAYS, pruned or not', async () => {
    const { owner } = await directBridge([]);
    const stub = env.BRIDGE.get(env.BRIDGE.idFromName(owner));
    const now = Date.now();
    await runInDurableObject(stub, (_i, state) => {
      for (const d of [RETENTION_DAYS + 1, RETENTION_DAYS - 1]) {
        state.storage.sql.exec("INSERT INTO bridge_calls (day, server, method, calls, duration_ms) VALUES (?, 'a', 'tools/call', 1, 0)", dayOf(now - d * DAY_MS));
      }
    });
    expect(await runDurableObjectAlarm(stub)).toBe(false);
    expect(await stub.usage(dayOf(now - 400 * DAY_MS), dayOf(now))).toEqual([{ day: dayOf(now - (RETENTION_DAYS - 1) * DAY_MS), server: 'a', method: 'tools/call', calls: 1, duration_ms: 0 }]);
    expect(await runInDurableObject(stub, (_i, state) => state.storage.sql.exec<{ n: number }>('SELECT COUNT(*) AS n FROM bridge_calls').one().n)).toBe(2);
  });
});
