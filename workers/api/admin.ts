// Operators' management of owners (/api/admin/owners), NIP-98 authenticated, EDGESTR_ADMINS only
// (403 for everyone else, before any Durable Object is touched): list the owners with their plan
// and usage (a page at a time: `?limit=` up to OVERVIEW_PAGE_MAX, the default, registered owners in
// key order, the EDGESTR_OWNERS ones on the first page; `next` names the `?cursor=` of the next
// page when there is one), add one (optionally on a plan), change its plan, suspend / resume it,
// vet it or not (`vetted`: whether its bridge is one of this deployment's, re-recorded on the public
// shard at once: common/deployment-bridges.ts recordPublicBridge; an owner that signed itself up is
// not vetted), remove it.
// Owners listed in EDGESTR_OWNERS are shown but managed in that variable (409 here). After a
// change the owner's shard is pushed its account as the registry holds it then, with that change's
// version (Accounts.standing; the shard ignores a push older than what it holds, so overlapping
// calls cannot leave it on a stale account) and its agents are told at once (Agent.ownerChanged);
// router isolates learn it within OWNER_CACHE_MS. Removing an owner first backs its shard up to
// the BACKUPS bucket when one is bound (workers/relay-do/backup.ts; a failed backup removes
// nothing), and keeps the shard's data either way (docs/OPERATIONS.md, "Accounts and plans"). A
// removal whose notice fails answers 503 saying so (the owner is removed); a DELETE of a key
// already removed sends the notice again (204).
// Also the backups of any shard, the public one included (adminShardRoutes, /api/admin/shards/
// <public|pubkey>/backups and POST …/restore {backup}): a shard is restored as its owner's
// restore would be (events, revocations and provisioning records, the side each event was counted
// in, the shard's retention rules when it has none of its own; docs/OPERATIONS.md "Backups"),
// the public shard's events as published by their authors; and the retention
// rules of any shard (PATCH …/retention {rules}, as an owner's PATCH /api/relay/retention): the
// public shard has no owner to set them, and once at max_stored_bytes it frees room only by them,
// NIP-40 expiry, requests to vanish and deletions.

import { Hono } from 'hono';
import { z } from 'zod';
import { parsePubkey } from '../../src/shared/keys.js';
import { accountsStub, OVERVIEW_PAGE_MAX, type AccountsBindings } from '../accounts/accounts-do.js';
import { DEFAULT_PLAN, plansOf, type PlanEnv } from '../accounts/plans.js';
import { forgetOwnerState, isAdmin, staticOwners, type OwnerEnv } from '../common/owners.js';
import { PUBLIC_SHARD, shardStub, type RouterBindings } from '../common/shards.js';
import { backupKey, backupName, backupShard, listBackups, readBackupLines, type BackupBindings } from '../relay-do/backup.js';
import { importAnswer, importInto, RestoreSchema, shardUrl } from './relay.js';
import { RetentionSchema } from '../relay-do/retention.js';
import { errorMessage } from '../../src/shared/errors.js';
import { agentStub, bodyAs, issuesOf, type AgentApiBindings } from './agents.js';
import type { ApiStateBindings } from './api-state.js';
import { recordPublicBridge } from '../common/deployment-bridges.js';
import { bridgeStub, type BridgeApiBindings } from './bridge.js';
import { nip98, type AuthedVariables } from './nip98-auth.js';

export interface AdminApiBindings
  extends ApiStateBindings,
    AccountsBindings,
    RouterBindings,
    OwnerEnv,
    PlanEnv,
    BackupBindings,
    Pick<AgentApiBindings, 'AGENT'>,
    Pick<BridgeApiBindings, 'BRIDGE'> {}

type ApiEnv = { Bindings: AdminApiBindings; Variables: AuthedVariables };

export const NOT_AN_ADMIN = 'only the operators of this deployment (EDGESTR_ADMINS) may do this';
const STATIC_OWNER = 'this owner is listed in EDGESTR_OWNERS: change that variable instead';
const NO_OWNER = 'no such owner';

const PubkeySchema = z.string().transform((s, ctx) => {
  const hex = parsePubkey(s.trim());
  if (hex) return hex;
  ctx.addIssue({ code: 'custom', message: 'a 64-hex pubkey or an npub' });
  return z.NEVER;
});
/** A shard named by an operator: "public" (null) or an owner's pubkey. */
const ShardSchema = z.union([z.literal(PUBLIC_SHARD).transform(() => null), PubkeySchema]);
const NO_BACKUPS = 'backups are not configured on this deployment (no BACKUPS bucket)';
const NO_SHARD = 'no such shard: "public" or an owner’s 64-hex pubkey or npub';
const AddOwnerSchema = z.object({ pubkey: PubkeySchema, plan: z.string().optional() }).strict();
const PatchOwnerSchema = z.object({ plan: z.string().optional(), suspended: z.boolean().optional(), vetted: z.boolean().optional() }).strict();
/** GET /api/admin/owners: a page of at most `limit` registered owners after the key `cursor` (the `next` of the page before). */
const OwnersQuery = z.object({
  limit: z.coerce.number().int().min(1).max(OVERVIEW_PAGE_MAX).default(OVERVIEW_PAGE_MAX),
  cursor: z.string().regex(/^[0-9a-f]{64}$/, 'the `next` of the page before').optional(),
});

/** The 422 issue for a plan name EDGESTR_PLANS does not define. */
const planIssue = (env: PlanEnv, plan: string | undefined) =>
  plan !== undefined && !Object.hasOwn(plansOf(env), plan) ? [{ path: 'plan', message: `no plan "${plan}" in EDGESTR_PLANS (plans: ${Object.keys(plansOf(env)).join(', ')})` }] : [];

/**
 * Tells the owner's shard its account as the registry holds it now, with its version (undefined:
 * removed), and its agents (they refresh it from the registry), every agent even when one fails.
 * Why not all were told, or undefined.
 */
async function notifyOwner(env: AdminApiBindings, owner: string): Promise<string | undefined> {
  forgetOwnerState();
  const standing = await accountsStub(env).standing(owner);
  if (!standing) return 'the registry no longer knows the key';
  const shard = shardStub(env, owner);
  let agents: string[];
  try {
    await shard.setOwnerAccount(standing.account, standing.version);
    agents = await shard.provisionedAgents(owner);
  } catch (e) {
    return `the shard: ${errorMessage(e)}`;
  }
  const told = await Promise.allSettled(agents.map((a) => agentStub(env, a).ownerChanged()));
  const failed = agents.flatMap((a, i) => {
    const t = told[i];
    return t?.status === 'rejected' ? [`agent ${a}: ${errorMessage(t.reason)}`] : [];
  });
  return failed.length === 0 ? undefined : failed.join('; ');
}

/** The 503 answer of a change the registry made whose notice failed: what was `done`, why not all were told, how to tell them `again`. */
const notTold = (done: string, failed: string, again: string) => ({ error: `${done}; its shard/agents could not all be told (${failed}); ${again}` });

export function adminRoutes() {
  const app = new Hono<ApiEnv>();
  app.use('*', nip98<AdminApiBindings>((env, pubkey) => (isAdmin(env, pubkey) ? undefined : NOT_AN_ADMIN)));

  app.get('/', async (c) => {
    const parsed = OwnersQuery.safeParse(c.req.query());
    if (!parsed.success) return c.json({ error: 'invalid query', issues: issuesOf(parsed.error) }, 422);
    return c.json(await accountsStub(c.env).overview(Date.now(), parsed.data.limit, parsed.data.cursor));
  });

  app.post('/', async (c) => {
    const parsed = bodyAs(c.get('body'), AddOwnerSchema, 'owner');
    if (!parsed.ok) return c.json(parsed.error, 422);
    const { pubkey, plan = DEFAULT_PLAN } = parsed.data;
    const bad = planIssue(c.env, plan);
    if (bad.length) return c.json({ error: 'invalid owner', issues: bad }, 422);
    if (staticOwners(c.env).has(pubkey)) return c.json({ error: STATIC_OWNER }, 409);
    if (!(await accountsStub(c.env).add(pubkey, plan))) return c.json({ error: 'this owner already exists' }, 409);
    const failed = await notifyOwner(c.env, pubkey);
    if (failed !== undefined) return c.json(notTold('added to the registry', failed, `send PATCH /api/admin/owners/${pubkey} {} to tell them again`), 503);
    return c.json({ pubkey, plan, suspended: false }, 201);
  });

  app.patch('/:pubkey', async (c) => {
    const pubkey = parsePubkey(c.req.param('pubkey'));
    if (!pubkey) return c.json({ error: NO_OWNER }, 404);
    if (staticOwners(c.env).has(pubkey)) return c.json({ error: STATIC_OWNER }, 409);
    const parsed = bodyAs(c.get('body'), PatchOwnerSchema, 'owner');
    if (!parsed.ok) return c.json(parsed.error, 422);
    const bad = planIssue(c.env, parsed.data.plan);
    if (bad.length) return c.json({ error: 'invalid owner', issues: bad }, 422);
    const row = await accountsStub(c.env).update(pubkey, parsed.data);
    if (!row) return c.json({ error: NO_OWNER }, 404);
    const failed = await notifyOwner(c.env, pubkey);
    if (failed !== undefined) return c.json(notTold('changed in the registry', failed, 'send PATCH again'), 503);
    if (parsed.data.vetted !== undefined) {
      // The owner's bridge key (known once it has a server) is recorded on the public shard again.
      const provider = (await bridgeStub(c.env, pubkey).list())[0]?.provider;
      if (provider) await recordPublicBridge(c.env, pubkey, provider, row.vetted);
    }
    return c.json(row);
  });

  app.delete('/:pubkey', async (c) => {
    const pubkey = parsePubkey(c.req.param('pubkey'));
    if (!pubkey) return c.json({ error: NO_OWNER }, 404);
    if (staticOwners(c.env).has(pubkey)) return c.json({ error: STATIC_OWNER }, 409);
    const accounts = accountsStub(c.env);
    if (await accounts.owner(pubkey)) {
      if (c.env.BACKUPS) {
        try {
          await backupShard(c.env, c.env.BACKUPS, pubkey, backupKey(pubkey, backupName(Date.now())));
        } catch (e) {
          return c.json({ error: `the owner’s shard could not be backed up first, nothing was removed: ${errorMessage(e)}` }, 500);
        }
      }
      await accounts.remove(pubkey);
    } else if ((await accounts.standing(pubkey)) === undefined) {
      // Neither registered nor removed before (a removed key's DELETE sends the notice again).
      return c.json({ error: NO_OWNER }, 404);
    }
    const failed = await notifyOwner(c.env, pubkey);
    if (failed !== undefined) return c.json(notTold('removed from the registry', failed, 'send DELETE again'), 503);
    return c.body(null, 204);
  });

  return app;
}

/** /api/admin/shards/<shard>/backups and /restore: any shard's backups (see the header). */
export function adminShardRoutes() {
  const app = new Hono<ApiEnv>();
  app.use('*', nip98<AdminApiBindings>((env, pubkey) => (isAdmin(env, pubkey) ? undefined : NOT_AN_ADMIN)));

  app.get('/:shard/backups', async (c) => {
    if (!c.env.BACKUPS) return c.json({ error: NO_BACKUPS }, 404);
    const shard = ShardSchema.safeParse(c.req.param('shard'));
    if (!shard.success) return c.json({ error: NO_SHARD }, 404);
    return c.json({ backups: await listBackups(c.env.BACKUPS, shard.data) });
  });

  app.post('/:shard/restore', async (c) => {
    const bucket = c.env.BACKUPS;
    if (!bucket) return c.json({ error: NO_BACKUPS }, 404);
    const shard = ShardSchema.safeParse(c.req.param('shard'));
    if (!shard.success) return c.json({ error: NO_SHARD }, 404);
    const parsed = bodyAs(c.get('body'), RestoreSchema, 'restore');
    if (!parsed.ok) return c.json(parsed.error, 422);
    const lines = await readBackupLines(bucket, shard.data, parsed.data.backup);
    if (!lines) return c.json({ error: `no backup named ${parsed.data.backup} for this shard` }, 404);
    return importAnswer(c, await importInto(c.env, shard.data, shardUrl(c.env, c.req.url, shard.data), 'restore', lines));
  });

  app.patch('/:shard/retention', async (c) => {
    const shard = ShardSchema.safeParse(c.req.param('shard'));
    if (!shard.success) return c.json({ error: NO_SHARD }, 404);
    const parsed = bodyAs(c.get('body'), RetentionSchema, 'retention');
    if (!parsed.ok) return c.json(parsed.error, 422);
    return c.json({ rules: await shardStub(c.env, shard.data).setRetentionRules(parsed.data.rules) });
  });

  return app;
}
