// The owner registry while the Accounts object is unreachable (workers/common/owners.ts): each
// isolate keeps serving its last copy of the registry and asks again at most every
// REGISTRY_RETRY_MS, instead of one Accounts RPC (and one log line) per stranger's request; with no
// copy at all the failure is answered at once for that long, without an RPC.
import { env } from 'cloudflare:test';
import { afterEach, describe, expect, it } from 'vitest';
import { accountsStub } from '../../workers/accounts/accounts-do.js';
import { forgetOwnerState, OWNER_CACHE_MS, REGISTRY_RETRY_MS, registryAt } from '../../workers/common/owners.js';
import { keys } from './helpers.js';
import { holdObject } from './hold-object.js';

const holdAccounts = () => holdObject(accountsStub(env));

/** Whether `p` has settled after a few turns of the event loop (a call waiting on the held Accounts object cannot). */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  await new Promise((r) => setTimeout(r, 100));
  return done;
}

afterEach(() => forgetOwnerState());

describe('the owner registry while Accounts is unreachable', () => {
  it('serves the copy it has, asks again only after REGISTRY_RETRY_MS, and is fresh again once Accounts answers', async () => {
    const owner = keys().pk;
    await accountsStub(env).add(owner, 'default');
    forgetOwnerState();
    const t0 = Date.now();
    expect((await registryAt(env, t0)).get(owner)).toEqual({ plan: 'default', suspended: false });

    // The copy is stale: the next request asks Accounts, which fails; the copy is served all the same.
    const release = await holdAccounts();
    const stale = registryAt(env, t0 + OWNER_CACHE_MS + 1);
    expect(await settled(stale)).toBe(false); // it asked
    await release(new Error('simulated Accounts reset'));
    expect((await stale).get(owner)).toEqual({ plan: 'default', suspended: false });

    // Within REGISTRY_RETRY_MS of the failure: no RPC at all (answered while Accounts is held).
    const releaseAgain = await holdAccounts();
    const quiet = registryAt(env, t0 + OWNER_CACHE_MS + 2);
    expect(await settled(quiet)).toBe(true);
    expect((await quiet).get(owner)).toEqual({ plan: 'default', suspended: false });
    await releaseAgain(new Error('simulated Accounts reset'));

    // After it, Accounts is asked again and its answer kept.
    const later = owner;
    expect((await registryAt(env, t0 + OWNER_CACHE_MS + 2 + REGISTRY_RETRY_MS)).get(later)).toEqual({ plan: 'default', suspended: false });
  });

  it('with no copy, the failure is answered at once for REGISTRY_RETRY_MS (no RPC per request), then Accounts is asked again', async () => {
    forgetOwnerState();
    const t0 = Date.now();
    const release = await holdAccounts();
    const first = registryAt(env, t0);
    expect(await settled(first)).toBe(false);
    await release(new Error('simulated Accounts reset'));
    await expect(first).rejects.toThrow('simulated Accounts reset');

    const releaseAgain = await holdAccounts();
    const second = registryAt(env, t0 + 1);
    expect(await settled(second)).toBe(true);
    await expect(second).rejects.toThrow('the owner registry could not be read (simulated Accounts reset); asked again in 5 s');
    await releaseAgain(new Error('simulated Accounts reset'));

    expect(await registryAt(env, t0 + REGISTRY_RETRY_MS)).toBeInstanceOf(Map);
  });
});
