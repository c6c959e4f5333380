// What the owner of a hosted agent reads of a failed run, against the instance for hosted agents
// (the fake LLM provider's `fake-401` model answers HTTP 401, as a bad API key does): in the
// console, its own prompt's error carries the provider's text, and the Telemetry log's
// session_resolved line ends with it whole; `edgestr ask` by the owner prints it (exit 3), by
// anyone else the generic message.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { bytesToHex } from '../../src/shared/hex.js';
import { E2E_OWNER_SK } from './e2e-keys.js';
import { edgestr, tempHome } from './cli-run.js';
import { conversation, launch, newPage, signInWithKey } from './console-browser.js';
import { signedApi } from './helpers.js';

const httpUrl = inject('agentHttpUrl');
const NAME = 'console bad key agent';
/** What the fake OpenAI server answers a request for `fake-401`, as the agent reports it. */
const UPSTREAM = 'HTTP 401: Incorrect API key provided: sk-fake***1234.';

let browser: Browser;
let agent: string;
const call = signedApi(httpUrl, E2E_OWNER_SK);

beforeAll(async () => {
  browser = await launch();
  const created = await call('POST', '/api/agents', { name: NAME, provider: 'openai', models: ['fake-401'] });
  expect(created.status).toBe(201);
  agent = (created.json as { pubkey: string }).pubkey;
});
afterAll(async () => {
  await browser?.close();
  expect((await call('DELETE', `/api/agents/${agent}`)).status).toBe(204);
});

it('the owner’s prompt to an agent whose provider refuses its key: the error and the Telemetry line carry the provider’s text', async () => {
  const { context, page, errors } = await newPage(browser);
  await page.goto(`${httpUrl}/console`);
  await signInWithKey(page, E2E_OWNER_SK);
  await page.getByText('watching your agents’ telemetry').waitFor();
  await page.getByRole('combobox', { name: 'Agent', exact: true }).selectOption({ label: `${NAME} (yours)` });
  await page.getByRole('textbox', { name: 'Message' }).fill('hello with a bad key');
  await page.getByRole('button', { name: 'Send', exact: true }).click();
  await conversation(page).getByText(`MODEL_UNAVAILABLE: ${UPSTREAM}`, { exact: false }).waitFor();
  const telemetry = page.getByRole('log', { name: 'Telemetry' });
  const escaped = UPSTREAM.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  await telemetry.getByText(new RegExp(`^.*${NAME} #\\d+ session_resolved turn [0-9a-f]{8} MODEL_UNAVAILABLE · fake-401 · 0 in / 0 out tokens · 0 tool calls · \\d+\\.\\d s · ${escaped}$`)).waitFor();
  expect(errors).toEqual([]);
  await context.close();
});

it('edgestr ask: the owner is told the provider’s text, anyone else the generic message (exit 3 both)', async () => {
  const ownerHome = tempHome();
  mkdirSync(join(ownerHome, '.config', 'edgestr'), { recursive: true });
  writeFileSync(join(ownerHome, '.config', 'edgestr', 'key'), `${bytesToHex(E2E_OWNER_SK)}\n`, { mode: 0o600 });
  const mine = await edgestr(['ask', agent, 'hi'], { home: ownerHome, url: httpUrl });
  expect(mine).toMatchObject({ code: 3, stderr: expect.stringContaining(`error MODEL_UNAVAILABLE: ${UPSTREAM}`) });
  const theirs = await edgestr(['ask', agent, 'hi'], { home: tempHome(), url: httpUrl });
  expect(theirs).toMatchObject({ code: 3, stderr: expect.stringContaining('error MODEL_UNAVAILABLE: the model provider refused the request; the agent owner can see why') });
}, 30_000);
