// The console's owner panel and tools panel in headless Chromium: the e2e owner creates, edits and
// deletes an agent through the form (checked against the management API), an invalid agent is
// refused with the API's reason, an agent that follows the deployment's provider is edited without
// pinning it; and, on the development instance, a DVMCP server registered with
// the bridge (the real server-everything) is found by "Find tools", shown as this deployment's
// bridge, its tool called through a form generated from the input schema, with progress shown.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { sha256 } from '@noble/hashes/sha2.js';
import { bytesToHex } from '../../src/shared/hex.js';
import { E2E_OWNER_SK } from './e2e-keys.js';
import { launch, newPage, signInWithKey } from './console-browser.js';
import { signedApi } from './helpers.js';
import '../mcp/provided.js';

let browser: Browser;
beforeAll(async () => {
  browser = await launch();
});
afterAll(async () => {
  await browser?.close();
});


describe('owner panel (agent instance)', () => {
  const base = inject('agentHttpUrl');

  it('creates, edits and deletes an agent through /api, and shows the API’s reason for an invalid one', async () => {
    const { context, page, errors } = await newPage(browser);
    page.on('dialog', (d) => void d.accept());
    await page.goto(`${base}/console`);
    await signInWithKey(page, E2E_OWNER_SK);
    const agents = page.getByRole('list', { name: 'Your agents' });
    await page.getByText('watching your agents’ telemetry').waitFor();

    // Invalid: no name.
    await page.getByRole('button', { name: 'Create agent' }).click();
    await page.getByText(/^creating failed: invalid agent \(name: /).waitFor();

    const name = `panel ${bytesToHex(crypto.getRandomValues(new Uint8Array(3)))}`;
    await page.getByLabel('Name', { exact: true }).fill(name);
    await page.getByLabel('Provider').selectOption('echo');
    await page.getByLabel('System prompt').fill('Be brief.');
    await page.getByRole('button', { name: 'Create agent' }).click();
    await page.getByText(`${name} created`).waitFor();
    await agents.getByText(name, { exact: true }).waitFor();
    // The new agent is in the picker as one of "yours".
    const picker = page.getByRole('combobox', { name: 'Agent', exact: true });
    await picker.selectOption({ label: `${name} (yours)` });
    const pubkey = await picker.inputValue();
    const created = await signedApi(base, E2E_OWNER_SK)('GET', `/api/agents/${pubkey}`);
    expect(created.status).toBe(200);
    expect(created.json).toMatchObject({ name, provider: 'echo', system_prompt: 'Be brief.' });

    await page.getByRole('button', { name: `Edit ${name}` }).click();
    expect(await page.getByLabel('System prompt').inputValue()).toBe('Be brief.');
    await page.getByLabel('Name', { exact: true }).fill(`${name} renamed`);
    await page.getByLabel('System prompt').fill('Be very brief.');
    await page.getByRole('button', { name: 'Save agent' }).click();
    await page.getByText(`${name} renamed saved`).waitFor();
    const edited = await signedApi(base, E2E_OWNER_SK)('GET', `/api/agents/${pubkey}`);
    expect(edited.json).toMatchObject({ name: `${name} renamed`, system_prompt: 'Be very brief.' });

    await page.getByRole('button', { name: `Delete ${name} renamed` }).click();
    await page.getByText(`${name} renamed deleted`).waitFor();
    expect(await agents.getByText(`${name} renamed`, { exact: true }).count()).toBe(0);
    expect((await signedApi(base, E2E_OWNER_SK)('GET', `/api/agents/${pubkey}`)).status).toBe(404);
    // The browser logs the refused POST; nothing else went wrong.
    expect(errors).toEqual(['Failed to load resource: the server responded with a status of 422 (Unprocessable Entity)']);
    await context.close();
  });

  it('edits an agent created without a provider without pinning one: the form shows “deployment default”, a rename is saved, the agent still follows the deployment', async () => {
    const name = `follower ${bytesToHex(crypto.getRandomValues(new Uint8Array(3)))}`;
    const call = signedApi(base, E2E_OWNER_SK);
    const created = await call('POST', '/api/agents', { name });
    expect(created.status).toBe(201);
    const pubkey = (created.json as { pubkey: string }).pubkey;
    const { context, page, errors } = await newPage(browser);
    await page.goto(`${base}/console`);
    await signInWithKey(page, E2E_OWNER_SK);
    const agents = page.getByRole('list', { name: 'Your agents' });
    await agents.getByText('deployment default (openai)').first().waitFor();
    await page.getByRole('button', { name: `Edit ${name}` }).click();
    expect(await page.getByLabel('Provider').inputValue()).toBe('');
    expect(await page.getByLabel('Model').inputValue()).toBe('');
    await page.getByLabel('Name', { exact: true }).fill(`${name} renamed`);
    await page.getByRole('button', { name: 'Save agent' }).click();
    await page.getByText(`${name} renamed saved`).waitFor();
    const after = await call('GET', `/api/agents/${pubkey}`);
    expect(after.json).toMatchObject({ name: `${name} renamed`, effective_provider: 'openai' });
    expect(after.json).not.toHaveProperty('provider');
    expect(after.json).not.toHaveProperty('models');
    expect((await call('DELETE', `/api/agents/${pubkey}`)).status).toBe(204);
    expect(errors).toEqual([]);
    await context.close();
  });
});

describe('tools panel (development instance)', () => {
  const base = inject('httpUrl');
  const DEMO_OWNER_SK = sha256(new TextEncoder().encode('edgestr demo owner (local development only)'));
  const id = `cs${bytesToHex(crypto.getRandomValues(new Uint8Array(3)))}`;

  // The wrangler instance is shared by every e2e file: the server registered here goes again.
  afterAll(async () => {
    expect((await signedApi(base, DEMO_OWNER_SK)('DELETE', `/api/bridge/servers/${id}`)).status).toBe(204);
  });

  it('finds the announced tools, builds a form from the input schema, and calls a tool with progress', async () => {
    const reg = await signedApi(base, DEMO_OWNER_SK)('POST', '/api/bridge/servers', { id, url: inject('mcpEverythingUrl'), name: 'Everything', public: true, encryption: true });
    expect(reg.status).toBe(201);
    const { context, page, errors } = await newPage(browser);
    await page.goto(`${base}/console`);
    await page.getByRole('button', { name: 'Use a local key' }).click();
    await page.getByRole('status').getByText('new conversation').waitFor();

    const use = page.getByRole('button', { name: `Use ${id}/echo`, exact: true });
    for (let i = 0; i < 40 && (await use.count()) === 0; i++) {
      await page.getByRole('button', { name: 'Find tools' }).click();
      await page.waitForTimeout(250);
    }
    // The entry says whose server it is: this deployment's bridge (the public shard's NIP-11 names it).
    expect(await page.getByRole('listitem').filter({ has: use }).textContent()).toMatch(/provider npub1[a-z0-9]{8}…[a-z0-9]{6} \(this deployment's bridge\)/);
    await use.click();
    const output = page.getByRole('log', { name: 'Tool output' });
    // Required fields are checked before anything is sent.
    await page.getByRole('button', { name: 'Call tool' }).click();
    await output.getByText('message is required').waitFor();
    await page.getByLabel(/^message \(required\)/).fill('from the console');
    await page.getByRole('button', { name: 'Call tool' }).click();
    await output.getByText('result: Echo: from the console').waitFor({ timeout: 20_000 });

    await page.getByRole('button', { name: `Use ${id}/trigger-long-running-operation`, exact: true }).click();
    await page.getByLabel(/^duration/).fill('2');
    await page.getByLabel(/^steps/).fill('4');
    await page.getByRole('button', { name: 'Call tool' }).click();
    await output.getByText(/^progress 1\/4/).waitFor({ timeout: 20_000 });
    await output.getByText(/^result: Long running operation completed/).waitFor({ timeout: 20_000 });
    expect(errors).toEqual([]);
    await context.close();
  }, 60_000);
});
