// Personal relay operations: export (JSONL, resumable, paged), import (verified, through the write
// policy, idempotent, capped) and export → import into an empty shard giving identical queries.
import { describe, expect, it } from 'vitest';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { fetchWithEnv } from './app-env.js';
import { keys, now, sign } from './helpers.js';
import { EXPORT_PAGE } from '../../workers/relay-do/export.js';
import { IMPORT_MAX_BYTES } from '../../workers/api/relay.js';
import { exportOf, importInto, jsonl, notes, opsCall, publishAsOwner, queryShard } from './relay-ops-helpers.js';

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
    expect(await notOwner.json()).toEqual({ error: 'this pubkey may not own agents on this deployment (EDGESTR_OWNERS)' });
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

  it(`413 for a body over ${IMPORT_MAX_BYTES} bytes`, async () => {
    const owner = keys();
    const res = await opsCall(owner, 'POST', '/api/relay/import', 'x'.repeat(IMPORT_MAX_BYTES + 1));
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({ error: `request body too large (max ${IMPORT_MAX_BYTES} bytes)` });
  });
});
