// A plan's `models` (workers/accounts/plans.ts): the model names an owner on it may have its agents
// call, so that a plan's token limits, sized for a cheap model, cannot be spent on one a hundred
// times the price. The agent API refuses other names at create and update (422 naming the field and
// the plan's list); a run whose model the plan no longer allows (the plans changed since) is refused
// before its model call, the list told to the owner alone; the echo provider is free and never
// restricted.
import { env, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { api } from './api-helpers.js';
import { apiWithEnv } from './app-env.js';
import { NipXxClient, watchRunsEnded } from './agent-helpers.js';
import { keys, type Keys } from './helpers.js';
import { TEST_ADMIN_SK } from './test-keys.js';

/** The plans of the audit's case: a default plan sized for gpt-4o-mini. */
const MINI = { EDGESTR_PLANS: JSON.stringify({ default: { agents: 1, tokens_per_day: 1000, models: ['gpt-4o-mini'] } }) };
const ALLOWS_MINI = 'the owner’s plan allows the models gpt-4o-mini';

/** A new owner added by the operator on the default plan. */
async function addOwner(): Promise<Keys> {
  const k = keys();
  expect((await api(TEST_ADMIN_SK, 'POST', '/api/admin/owners', { pubkey: k.pk })).status).toBe(201);
  return k;
}

const invalid = (...issues: Array<[string, string]>) => ({ status: 422, json: { error: 'invalid agent', issues: issues.map(([path, message]) => ({ path, message })) } });

describe('the agent API under a plan that names its models', () => {
  it('refuses a model the plan does not name (models and default_model, at create and update), creates one it names, and leaves echo free', async () => {
    const owner = await addOwner();
    const post = (body: object) => apiWithEnv(MINI, owner.sk, 'POST', '/api/agents', { name: 'priced', ...body });
    expect(await post({ provider: 'openai', models: ['o1'] })).toEqual(invalid(['models.0', ALLOWS_MINI]));
    expect(await post({ provider: 'anthropic', models: ['gpt-4o-mini', 'claude-opus-4-1'] })).toEqual(invalid(['models.1', ALLOWS_MINI]));
    expect(await post({ provider: 'openai', models: ['gpt-4o-mini'], default_model: 'o1' })).toEqual(invalid(['default_model', ALLOWS_MINI]));
    // An agent that names no provider follows the deployment's (here openai): restricted alike.
    expect(await post({ models: ['o1'] })).toEqual(invalid(['models.0', ALLOWS_MINI]));

    const created = await post({ provider: 'openai', models: ['gpt-4o-mini'] });
    expect(created.status).toBe(201);
    const agent = (created.json as { pubkey: string }).pubkey;
    const patch = (body: object) => apiWithEnv(MINI, owner.sk, 'PATCH', `/api/agents/${agent}`, body);
    expect(await patch({ models: ['gpt-4o-mini', 'o1'] })).toEqual(invalid(['models.1', ALLOWS_MINI]));
    expect(await patch({ default_model: 'o1' })).toEqual(invalid(['default_model', ALLOWS_MINI]));
    expect((await patch({ name: 'renamed', models: ['gpt-4o-mini'] })).status).toBe(200);

    // Echo costs nothing: any model name, whatever the plan's list.
    const other = await addOwner();
    const echo = await apiWithEnv(MINI, other.sk, 'POST', '/api/agents', { name: 'free', provider: 'echo', models: ['o1'] });
    expect(echo.status).toBe(201);
    // "*" names every model.
    const any = { EDGESTR_PLANS: JSON.stringify({ default: { agents: 1, tokens_per_day: 1000, models: ['gpt-4o-mini', '*'] } }) };
    expect((await apiWithEnv(any, (await addOwner()).sk, 'POST', '/api/agents', { name: 'any', provider: 'openai', models: ['o1'] })).status).toBe(201);
  });
});

describe('a run under a plan changed after the agent was created', () => {
  it('is refused before its model call with UNSUPPORTED_MODEL: the sender told the model, the owner the plan’s list; an echo agent still answers', async () => {
    const owner = await addOwner();
    const make = async (body: object): Promise<string> => {
      const r = await api(owner.sk, 'POST', '/api/agents', { name: 'plan models', ...body });
      expect(r.status).toBe(201);
      return (r.json as { pubkey: string }).pubkey;
    };
    // Created under the tests' plans, whose default allows any model.
    const agent = await make({ provider: 'openai', models: ['gpt-4o-mini'] });
    const free = await make({ provider: 'echo' });
    const stub = env.AGENT.get(env.AGENT.idFromName(agent));
    const stranger = await NipXxClient.open(agent, keys(), `/r/${owner.pk}`);
    const ask = async (client: NipXxClient) => {
      const p = client.prompt({ ver: 1, message: 'hello there' });
      await client.send(p);
      return { id: p.id, terminal: (await client.collect(p.id)).terminal };
    };
    expect((await ask(stranger)).terminal.kind).toBe(25803);

    // The operator's plans change (a deploy): the default plan now names gpt-4o only.
    const agentEnv = await runInDurableObject(stub, (i) => (i as unknown as { env: Record<string, string | undefined> }).env);
    const saved = agentEnv.EDGESTR_PLANS;
    const setPlans = (plans: string | undefined) =>
      Promise.all([agent, free].map((a) => runInDurableObject(env.AGENT.get(env.AGENT.idFromName(a)), (i) => void ((i as unknown as { env: Record<string, string | undefined> }).env.EDGESTR_PLANS = plans))));
    await setPlans(JSON.stringify({ default: { models: ['gpt-4o'] } }));
    const watch = await watchRunsEnded([agent], owner);
    try {
      const refused = await ask(stranger);
      expect(refused.terminal.kind).toBe(25805);
      expect(refused.terminal.payload).toEqual({
        ver: 1,
        code: 'UNSUPPORTED_MODEL',
        message: 'the agent’s owner’s plan does not allow the model "gpt-4o-mini"',
        details: { quota: 'models' },
      });
      await watch.until(1);
      expect(watch.resolved).toEqual([
        expect.objectContaining({
          run_id: refused.id,
          outcome: 'UNSUPPORTED_MODEL',
          detail: 'the owner’s plan allows the models gpt-4o, not "gpt-4o-mini": change the agent’s models (PATCH /api/agents/<its key>) or the owner’s plan',
          usage: expect.objectContaining({ input_tokens: 0, output_tokens: 0 }),
        }),
      ]);
      // The owner's own prompt is told the plan's list (told-to.ts), the action included.
      const mine = await ask(await NipXxClient.open(agent, owner, `/r/${owner.pk}`));
      expect(mine.terminal.payload).toMatchObject({ code: 'UNSUPPORTED_MODEL', message: 'the owner’s plan allows the models gpt-4o, not "gpt-4o-mini": change the agent’s models (PATCH /api/agents/<its key>) or the owner’s plan' });
      // The echo provider is free: never restricted by the list.
      expect((await ask(await NipXxClient.open(free, keys(), `/r/${owner.pk}`))).terminal.kind).toBe(25803);
    } finally {
      watch.stop();
      await setPlans(saved);
    }
  }, 30_000);
});
