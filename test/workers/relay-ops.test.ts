// Personal relay operations: export (JSONL, resumable, paged), import (verified, through the write
// policy, idempotent, capped) and export → import into an empty shard giving identical queries.
import { env } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { fetchWithEnv } from './app-env.js';
import { keys, now, sign } from './helpers.js';
import { EXPORT_PAGE, EXPORT_PAGE_BYTES, type ExportCursor, type ExportPage } from '../../workers/relay-do/export.js';
import { IMPORT_BATCH, IMPORT_BATCH_BYTES, importBatches, jsonLines } from '../../workers/relay-do/import.js';
import { IMPORT_MAX_BYTES } from '../../workers/api/relay.js';
import { shardStub } from '../../workers/common/shards.js';
import { bigNotes, bytesOf, exportOf, importAllOf, importInto, jsonl, notes, opsCall, publishAsOwner, queryShard } from './relay-ops-helpers.js';

describe('GET /api/relay/export', () => {
  it('streams the shard as JSONL in created_at order, one canonical event per line', async () => {
    const owner = keys();
    const t = now() - 1000;
    const events = notes(owner, 3, (i) => t + 10 - i); // published newest first
    await publishAsOwner(owner, events);
    const res = await opsCall(owner, 'GET', '/api/relay/export');
    expect(res.status).toBe(200);
    expect(res.headers.get('Content-Type')).toBe('application/x-ndjson');
    const text = new TextDecoder().decode(await res.arrayBuffer());
    const sorted = [...events].sort((a, b) => a.created_at - b.created_at);
    expect(text).toBe(jsonl(sorted));
  });

  it('is bounded by since and until (inclusive), so an interrupted export resumes', async () => {
    const owner = keys();
    const t = now() - 1000;
    const events = notes(owner, 5, (i) => t + i);
    await importInto(owner, jsonl(events));
    expect((await exportOf(owner, `?since=${t + 1}&until=${t + 3}`)).map((e) => e.id)).toEqual(events.slice(1, 4).map((e) => e.id));
    expect((await exportOf(owner, `?since=${t + 4}`)).map((e) => e.id)).toEqual([events[4]!.id]);
  });

  it('pages through more than one page of events sharing a created_at, each once', async () => {
    const owner = keys();
    const t = now() - 500;
    const events = notes(owner, EXPORT_PAGE + 7, () => t);
    expect(await importInto(owner, jsonl(events))).toEqual({ status: 200, json: { accepted: EXPORT_PAGE + 7, duplicate: 0, refused: {} } });
    const out = await exportOf(owner);
    expect(out.map((e) => e.id)).toEqual(events.map((e) => e.id).sort());
  });

  it(`a page holds at most ${EXPORT_PAGE_BYTES} bytes of events: 140 events of ~250 KB at one created_at come in several pages, each once, in order`, async () => {
    const owner = keys();
    const events = await bigNotes(owner, 140, now() - 500);
    await importAllOf(owner, events);
    const shard = shardStub(env, owner.pk);
    const pages: ExportPage[] = [];
    let after: ExportCursor | undefined;
    do {
      const page = await shard.exportPage(after ? { after } : {});
      pages.push(page);
      after = page.next;
    } while (after && pages.length <= events.length);
    expect(pages.length).toBeGreaterThanOrEqual(Math.ceil(bytesOf(jsonLines(jsonl(events))) / EXPORT_PAGE_BYTES));
    for (const page of pages) {
      expect(page.lines.length).toBeGreaterThan(0);
      expect(bytesOf(page.lines)).toBeLessThanOrEqual(EXPORT_PAGE_BYTES);
    }
    const sortedIds = events.map((e) => e.id).sort();
    expect(pages.flatMap((p) => p.lines.map((l) => (JSON.parse(l) as { id: string }).id))).toEqual(sortedIds);
    expect((await exportOf(owner)).map((e) => e.id)).toEqual(sortedIds);
  });

  it('422 for an until before since (not an empty 200 the caller would take for an empty shard); since = until is one second', async () => {
    const owner = keys();
    const backwards = await opsCall(owner, 'GET', '/api/relay/export?since=5&until=1');
    expect(backwards.status).toBe(422);
    expect(await backwards.json()).toEqual({ error: 'invalid query', issues: [{ path: 'until', message: 'until is before since' }] });
    const oneSecond = await opsCall(owner, 'GET', '/api/relay/export?since=5&until=5');
    expect(oneSecond.status).toBe(200);
    expect(await oneSecond.text()).toBe('');
  });

  it('422 for a bad since, 401 without NIP-98, 403 for a key that may not own', async () => {
    const owner = keys();
    const bad = await opsCall(owner, 'GET', '/api/relay/export?since=yesterday');
    expect(bad.status).toBe(422);
    expect(((await bad.json()) as { issues: Array<{ path: string }> }).issues.map((i) => i.path)).toEqual(['since']);
    const stranger = keys();
    const noAuth = await fetchWithEnv({ EDGESTR_OWNERS: owner.pk }, new Request('http://relay.test/api/relay/export'));
    expect(noAuth.status).toBe(401);
    expect(await noAuth.json()).toEqual({ error: 'NIP-98: missing Authorization header' });
    const url = 'http://relay.test/api/relay/export';
    const notOwner = await fetchWithEnv({ EDGESTR_OWNERS: owner.pk }, new Request(url, { headers: { Authorization: makeHttpAuthHeader(stranger.sk, url, 'GET') } }));
    expect(notOwner.status).toBe(403);
    expect(await notOwner.json()).toEqual({ error: 'this pubkey is not an owner on this deployment; ask the operators to add it' });
  });
});

describe('POST /api/relay/import', () => {
  it('export → import into an empty shard gives identical query results', async () => {
    const a = keys();
    const b = keys();
    const t = now() - 2000;
    const kept = notes(a, 4, (i) => t + i);
    const gone = sign(a, { content: 'to delete', created_at: t + 10 });
    const profileOld = sign(a, { kind: 0, content: '{"name":"old"}', created_at: t + 20 });
    const profile = sign(a, { kind: 0, content: '{"name":"new"}', created_at: t + 21 });
    const article = sign(a, { kind: 30023, content: 'article', tags: [['d', 'x']], created_at: t + 22 });
    const deletion = sign(a, { kind: 5, tags: [['e', gone.id]], created_at: t + 30 });
    await publishAsOwner(a, [...kept, gone, profileOld, profile, article, deletion]);
    const exported = await exportOf(a);
    expect(exported).toHaveLength(kept.length + 3); // notes, newest profile, article, deletion
    const r = await opsCall(b, 'POST', '/api/relay/import', jsonl(exported));
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ accepted: exported.length, duplicate: 0, refused: {} });
    for (const filter of [{}, { kinds: [0] }, { kinds: [1], limit: 2 }, { authors: [a.pk], kinds: [30023] }, { '#e': [gone.id] }]) {
      expect(await queryShard(b, b, filter)).toEqual(await queryShard(a, a, filter));
    }
    expect(await exportOf(b)).toEqual(exported);
  });

  it('is idempotent: importing twice accepts nothing new', async () => {
    const owner = keys();
    const events = notes(owner, 3, (i) => now() - 100 + i);
    expect(await importInto(owner, jsonl(events))).toEqual({ status: 200, json: { accepted: 3, duplicate: 0, refused: {} } });
    expect(await importInto(owner, jsonl(events))).toEqual({ status: 200, json: { accepted: 0, duplicate: 3, refused: {} } });
  });

  it('verifies every line and puts it through the write policy, counting refusals by reason', async () => {
    const owner = keys();
    const stranger = keys();
    const good = sign(owner, { content: 'ok' });
    const forged = { ...sign(owner, { content: 'x' }), content: 'tampered' };
    const ephemeral = sign(owner, { kind: 20001 });
    const future = sign(owner, { created_at: now() + 3600 });
    const protectedByOther = sign(stranger, { tags: [['-']] });
    const body = [JSON.stringify(good), '{not json', JSON.stringify(forged), JSON.stringify(ephemeral), JSON.stringify(future), JSON.stringify(protectedByOther), ''].join('\r\n');
    expect(await importInto(owner, body)).toEqual({
      status: 200,
      json: {
        accepted: 1,
        duplicate: 0,
        refused: {
          'invalid: line is not JSON': 1,
          'invalid: event id does not match the event hash': 1,
          'invalid: ephemeral events are not imported': 1,
          'invalid: created_at is too far in the future': 1,
          'restricted: this event is protected: only its author may publish it': 1,
        },
      },
    });
  });

  it(`goes to the shard in batches of at most ${IMPORT_BATCH} lines and ${IMPORT_BATCH_BYTES} bytes (a longer line alone), in order`, async () => {
    const owner = keys();
    const big = await bigNotes(owner, 30, now() - 300);
    const small = notes(owner, IMPORT_BATCH + 20, (i) => now() - 200 + (i % 100));
    const huge = 'z'.repeat(IMPORT_BATCH_BYTES + 1);
    const lines = [...jsonLines(jsonl(big)), huge, ...jsonLines(jsonl(small))];
    const batches: string[][] = [];
    for await (const batch of importBatches(lines)) batches.push(batch);
    expect(batches.flat()).toEqual(lines);
    for (const batch of batches) {
      expect(batch.length).toBeLessThanOrEqual(IMPORT_BATCH);
      if (batch.length > 1) expect(bytesOf(batch)).toBeLessThanOrEqual(IMPORT_BATCH_BYTES);
    }
    expect(batches.filter((b) => b.includes(huge))).toEqual([[huge]]);
    expect(batches.length).toBeGreaterThanOrEqual(Math.ceil(bytesOf(jsonLines(jsonl(big))) / IMPORT_BATCH_BYTES) + 1 + 2);
    // The big body itself (under the body cap) is imported whole through those batches.
    expect(await importInto(owner, jsonl(big))).toEqual({ status: 200, json: { accepted: big.length, duplicate: 0, refused: {} } });
    expect((await exportOf(owner)).map((e) => e.id)).toEqual(big.map((e) => e.id).sort());
  });

  it(`413 for a body over ${IMPORT_MAX_BYTES} bytes`, async () => {
    const owner = keys();
    const res = await opsCall(owner, 'POST', '/api/relay/import', 'x'.repeat(IMPORT_MAX_BYTES + 1));
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({ error: `request body too large (max ${IMPORT_MAX_BYTES} bytes)` });
  });
});
