// Which owners' bridges are this deployment's own: an owner the operators vetted (listed in
// EDGESTR_OWNERS, added through /api/admin/owners, or marked vetted there) has its bridge key
// recorded on the public shard as 'bridge' (NIP-11 `bridge_providers`, listed first by /mcp and the
// clients); a key that signed itself up (EDGESTR_SIGNUP=open) is recorded as provisioned only.
// Used by the management API (a server added, an owner vetted or not) and by the bridge itself
// (reinstated after its owner was added again).

import { accountsStub, type AccountsBindings } from '../accounts/accounts-do.js';
import { staticOwners, type OwnerEnv } from './owners.js';
import { shardStub, type RouterBindings } from './shards.js';

/** Whether `owner`'s bridge is one of this deployment's (the operators vetted the owner). */
export async function vettedOwner(env: OwnerEnv & AccountsBindings, owner: string): Promise<boolean> {
  return staticOwners(env).has(owner) || ((await accountsStub(env).owner(owner))?.vetted ?? false);
}

/**
 * Records the owner's bridge key on the public shard: a vetted owner's as one of this deployment's
 * bridges ('bridge'); another's as provisioned only (its ownership known there, never listed), a
 * 'bridge' record made before (earlier versions recorded every owner's, or the owner was vetted
 * then) taken back.
 */
export async function recordPublicBridge(env: Pick<RouterBindings, 'RELAY_SHARD'>, owner: string, provider: string, vetted: boolean): Promise<void> {
  const shard = shardStub(env, null);
  if (vetted) {
    await shard.provisionAgent(provider, owner, 'bridge');
    return;
  }
  await shard.revokeAgent(provider, owner);
  await shard.provisionAgent(provider, owner, 'provisioned');
}
