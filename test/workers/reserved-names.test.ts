// Names an operator or an owner chooses that JavaScript objects already have (`__proto__`,
// `constructor`, `toString`…): a plan in EDGESTR_PLANS (workers/accounts/plans.ts) and a price or a
// secret header of a bridge server (workers/bridge/config.ts). `__proto__` is refused with a clear
// error (JSON.parse makes it an own key, but zod's records dropped it silently: a plan vanished, and
// a capability priced under that name was served free); `constructor` works as an ordinary name
// (looked up as an own entry: planLimits, priceOf); camel-case names are not plan names at all.
import { describe, expect, it } from 'vitest';
import { api } from './api-helpers.js';
import { apiWithEnv } from './app-env.js';
import { everythingUrl } from './bridge-helpers.js';
import { keys } from './helpers.js';
import { TEST_ADMIN_SK, TEST_OWNER_SK } from './test-keys.js';

describe('plan names', () => {
  it('a plan named __proto__ fails every API call with a 500 naming it; toString is not a plan name', async () => {
    const proto = await apiWithEnv({ EDGESTR_PLANS: '{"default":{},"__proto__":{"agents":1}}' }, TEST_OWNER_SK, 'GET', '/api/agents');
    expect(proto).toEqual({ status: 500, json: { error: 'EDGESTR_PLANS.__proto__: "__proto__" cannot name a plan; choose another name' } });
    const alone = await apiWithEnv({ EDGESTR_PLANS: '{"__proto__":{"agents":1}}' }, TEST_OWNER_SK, 'GET', '/api/agents');
    expect(alone).toEqual({ status: 500, json: { error: 'EDGESTR_PLANS.__proto__: "__proto__" cannot name a plan; choose another name' } });
    const camel = await apiWithEnv({ EDGESTR_PLANS: '{"default":{},"toString":{}}' }, TEST_OWNER_SK, 'GET', '/api/agents');
    expect(camel).toEqual({ status: 500, json: { error: 'EDGESTR_PLANS.toString: plan names are 1-32 of a-z 0-9 _ -' } });
  });

  it('a plan named constructor is an ordinary plan: an owner on it gets its limits', async () => {
    const plans = { EDGESTR_PLANS: '{"default":{},"constructor":{"agents":1}}' };
    const owner = keys();
    expect(await apiWithEnv(plans, TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: owner.pk, plan: 'constructor' })).toEqual({
      status: 201,
      json: { pubkey: owner.pk, plan: 'constructor', suspended: false },
    });
    expect((await apiWithEnv(plans, owner.sk, 'POST', '/api/agents', { name: 'one', provider: 'echo' })).status).toBe(201);
    expect(await apiWithEnv(plans, owner.sk, 'POST', '/api/agents', { name: 'two', provider: 'echo' })).toEqual({
      status: 409,
      json: { error: 'the owner’s plan allows at most 1 agent; delete one first' },
    });
  });
});

describe('bridge server names', () => {
  // Bodies as text: a JavaScript object literal would make "__proto__" its prototype, not a key.
  const body = (extra: string) => `{"id":"reserved-${Math.random().toString(36).slice(2, 8)}","url":"${everythingUrl()}","public":false,${extra}}`;

  it('a price or a header named __proto__ is refused (422), not dropped', async () => {
    const price = await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', body('"prices":{"__proto__":{"price":"21","unit":"sats"}}'));
    expect(price).toEqual({ status: 422, json: { error: 'invalid server', issues: [{ path: 'prices.__proto__', message: '"__proto__" cannot be used as a name here' }] } });
    const header = await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', body('"headers":{"__proto__":"x"}'));
    expect(header).toEqual({ status: 422, json: { error: 'invalid server', issues: [{ path: 'headers.__proto__', message: '"__proto__" cannot be used as a name here' }] } });
  });

  it('a price named constructor is kept and shown', async () => {
    const r = await api(TEST_OWNER_SK, 'POST', '/api/bridge/servers', body('"prices":{"constructor":{"price":"21","unit":"sats"}}'));
    expect(r.status).toBe(201);
    const { id } = r.json as { id: string };
    const view = await api(TEST_OWNER_SK, 'GET', `/api/bridge/servers/${id}`);
    expect((view.json as { prices: unknown }).prices).toEqual({ constructor: { price: '21', unit: 'sats' } });
    expect((await api(TEST_OWNER_SK, 'DELETE', `/api/bridge/servers/${id}`)).status).toBe(204);
  });
});
