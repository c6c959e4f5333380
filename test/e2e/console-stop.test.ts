// The console's Stop button against the instance configured for hosted agents (the fake LLM
// provider): the e2e owner creates an OpenAI agent through the management API, signs in to the
// console with its key, picks the agent from "yours", sends a prompt that selects the fake
// provider's `slow` scenario (50 deltas, one every 200 ms), sees deltas stream, presses Stop
// (a 25806 cancel) and gets the agent's CANCELLED error; the run's telemetry shows its turn.
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { makeHttpAuthHeader } from '../../src/shared/nip98.js';
import { E2E_OWNER_SK } from './e2e-keys.js';
import { conversation, launch, newPage, screenshot, signInWithKey } from './console-browser.js';

const httpUrl = inject('agentHttpUrl');

let browser: Browser;
let agent: string;

beforeAll(async () => {
  browser = await launch();
  const url = `${httpUrl}/api/agents`;
  const body = JSON.stringify({ name: 'console stop agent', provider: 'openai', models: ['gpt-e2e', 'fake-slow'] });
  const res = await fetch(url, { method: 'POST', headers: { Authorization: makeHttpAuthHeader(E2E_OWNER_SK, url, 'POST', body), 'Content-Type': 'application/json' }, body });
  expect(res.status).toBe(201);
  agent = ((await res.json()) as { pubkey: string }).pubkey;
});
afterAll(async () => {
  await browser?.close();
  // The wrangler instance is shared by every e2e file: the agent created here goes again.
  const url = `${httpUrl}/api/agents/${agent}`;
  const res = await fetch(url, { method: 'DELETE', headers: { Authorization: makeHttpAuthHeader(E2E_OWNER_SK, url, 'DELETE') } });
  expect(res.status).toBe(204);
});

it('stops a slow run with Stop: deltas stop and the answer ends with CANCELLED', async () => {
  const { context, page, errors } = await newPage(browser);
  await page.goto(`${httpUrl}/console`);
  await signInWithKey(page, E2E_OWNER_SK);
  // No demo agent outside local development: the owner's own agent is in the picker.
  await page.getByRole('combobox', { name: 'Agent', exact: true }).selectOption({ label: 'console stop agent (yours)' });
  expect(await page.getByRole('combobox', { name: 'Agent', exact: true }).inputValue()).toBe(agent);
  await page.getByRole('status').getByText('new conversation').waitFor();
  expect(await page.getByRole('button', { name: 'Stop', exact: true }).count()).toBe(0);

  await page.getByRole('textbox', { name: 'Message' }).fill('scenario:slow please count');
  await page.getByRole('button', { name: 'Send', exact: true }).click();
  const log = conversation(page);
  await log.getByText(/tick 2 /).waitFor();
  const stop = page.getByRole('button', { name: 'Stop', exact: true });
  expect(await page.getByRole('button', { name: 'Send', exact: true }).isDisabled()).toBe(true);
  await stop.click();
  await log.getByText(/^CANCELLED: /).waitFor();
  const shown = (await log.textContent()) ?? '';
  expect(shown).not.toContain('tick 49');
  expect(await page.getByRole('button', { name: 'Stop', exact: true }).count()).toBe(0);
  expect(await page.getByRole('button', { name: 'Send', exact: true }).isDisabled()).toBe(false);
  await page.getByRole('log', { name: 'Telemetry' }).getByText(/console stop agent #\d+ turn_started/).first().waitFor();
  await screenshot(page, 'stopped');

  // After a reload the cancelled run is restored with its stored error.
  await page.reload();
  await log.getByText(/^CANCELLED: /).waitFor();
  expect(await log.getByText('scenario:slow please count').count()).toBe(1);
  expect(errors).toEqual([]);
  await context.close();
});

it('ends a slow run from the owner panel: cancel_turn on the Telemetry log stops it with CANCELLED', async () => {
  const { context, page, errors } = await newPage(browser);
  await page.goto(`${httpUrl}/console`);
  await signInWithKey(page, E2E_OWNER_SK);
  await page.getByRole('combobox', { name: 'Agent', exact: true }).selectOption({ label: 'console stop agent (yours)' });
  await page.getByRole('status').getByText(/restored/).waitFor();
  await page.getByText('watching your agents’ telemetry').waitFor();

  await page.getByRole('textbox', { name: 'Message' }).fill('scenario:slow count again');
  await page.getByRole('button', { name: 'Send', exact: true }).click();
  const log = conversation(page);
  await log.getByText(/tick 2 /).waitFor();
  const telemetry = page.getByRole('log', { name: 'Telemetry' });
  await telemetry.getByRole('button', { name: 'cancel_turn' }).last().click();
  await telemetry.getByText(/cancel_turn sent for turn [0-9a-f]{8}$/).waitFor();
  // The restored run's CANCELLED and this one's.
  await expect.poll(() => log.getByText(/^CANCELLED: /).count(), { timeout: 10_000 }).toBe(2);
  expect(await page.getByRole('button', { name: 'Stop', exact: true }).count()).toBe(0);
  expect(errors).toEqual([]);
  await context.close();
});
