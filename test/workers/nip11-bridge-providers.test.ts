// The public shard's NIP-11 document names this deployment's DVMCP bridges (`bridge_providers`, the
// provider keys POST /api/bridge/servers records on the public shard), so that clients (the
// `edgestr` command, edgestr/client, the console) can list those servers first and refuse a name a
// stranger's announcement claims too. Public, unauthenticated, read-only; owner shards' documents
// carry no such field.
import { SELF } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { registerServer } from './bridge-helpers.js';
import { BASE } from './helpers.js';
import { TEST_OWNER } from './test-keys.js';

async function nip11(path: string): Promise<{ res: Response; doc: Record<string, unknown> }> {
  const res = await SELF.fetch(`${BASE}${path}`, { headers: { Accept: 'application/nostr+json' } });
  return { res, doc: (await res.json()) as Record<string, unknown> };
}

describe('NIP-11 bridge_providers', () => {
  it("the public shard's document names the provider key of every bridge of this deployment; an owner shard's names none", async () => {
    const before = await nip11('/');
    expect(before.res.status).toBe(200);
    expect(before.res.headers.get('Content-Type')).toBe('application/nostr+json');
    expect(before.res.headers.get('Access-Control-Allow-Origin')).toBe('*');
    expect(before.doc).toMatchObject({ name: 'edgestr public shard', bridge_providers: [] });

    const { provider } = await registerServer({ id: 'nip11-a', public: false });
    const after = await nip11('/');
    expect(after.doc.bridge_providers).toEqual([provider]);
    expect(after.doc).toMatchObject({ name: 'edgestr public shard', limitation: { restricted_writes: false } });

    const owner = await nip11(`/r/${TEST_OWNER}`);
    expect(owner.res.status).toBe(200);
    expect(owner.doc.pubkey).toBe(TEST_OWNER);
    expect(owner.doc).not.toHaveProperty('bridge_providers');
  });
});
