// The owner's usage in the console (src/console/usage.ts), against the instance for hosted agents:
// the e2e owner's echo agent answers a prompt sent from the chat; the run's session_resolved line in
// the Telemetry log shows its tokens, the plan line its totals, and the Usage table the same runs and
// tokens as GET /api/usage?by=agent.
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { E2E_OWNER_SK } from './e2e-keys.js';
import { conversation, launch, newPage, signInWithKey } from './console-browser.js';
import { signedApi } from './helpers.js';

const httpUrl = inject('agentHttpUrl');
const NAME = 'console usage agent';

let browser: Browser;
let agent: string;
const call = signedApi(httpUrl, E2E_OWNER_SK);


beforeAll(async () => {
  browser = await launch();
  const created = await call('POST', '/api/agents', { name: NAME, provider: 'echo' });
  expect(created.status).toBe(201);
  agent = (created.json as { pubkey: string }).pubkey;
});
afterAll(async () => {
  await browser?.close();
  expect((await call('DELETE', `/api/agents/${agent}`)).status).toBe(204);
});

it('shows a run’s usage in the Telemetry log and the agent’s runs in the Usage table, as /api/usage counts them', async () => {
  const { context, page, errors } = await newPage(browser);
  await page.goto(`${httpUrl}/console`);
  await signInWithKey(page, E2E_OWNER_SK);
  await page.getByText('watching your agents’ telemetry').waitFor();
  const usage = page.getByRole('table', { name: 'Usage' });
  await usage.waitFor();
  await page.getByRole('combobox', { name: 'Agent', exact: true }).selectOption({ label: `${NAME} (yours)` });
  await page.getByRole('textbox', { name: 'Message' }).fill('count my tokens');
  await page.getByRole('button', { name: 'Send', exact: true }).click();
  await conversation(page).getByText('count my tokens', { exact: false }).last().waitFor();

  const telemetry = page.getByRole('log', { name: 'Telemetry' });
  const line = telemetry.getByText(new RegExp(`^.*${NAME} #\\d+ session_resolved turn [0-9a-f]{8} response · echo · \\d+ in / \\d+ out tokens · 0 tool calls · \\d+\\.\\d s$`));
  await line.waitFor();
  await page.getByText(/^today: \d[\d,]* runs · \d[\d,]* tokens · this month \d[\d,]* tokens \(plan default\)$/).waitFor();

  // The table refreshes after the run: the agent's row has its runs and tokens as /api/usage has them.
  const row = usage.getByRole('row', { name: new RegExp(`^${NAME}`) });
  await row.waitFor();
  const wanted = (await call('GET', '/api/usage?by=agent')).json as { rows: Array<{ key: string; runs: number; input_tokens: number; output_tokens: number }> };
  const mine = wanted.rows.find((r) => r.key === agent);
  expect(mine?.runs).toBe(1);
  const cells = await row.getByRole('cell').allTextContents();
  expect(cells.slice(0, 4)).toEqual([String(mine!.runs), mine!.input_tokens.toLocaleString('en'), mine!.output_tokens.toLocaleString('en'), '0']);
  await page.getByText(/^last 30 days · stored: \d[\d,]* events, \d[\d,]* of 2,147,483,648 bytes \(plan default\) · bridge calls: \d+$/).waitFor();
  expect(errors).toEqual([]);
  await context.close();
});
