// Headless Chromium for the console's browser tests: Debian's /usr/bin/chromium driven by
// playwright-core, screenshots under test-results/ (gitignored), and the console's sign-in steps.
import { mkdir } from 'node:fs/promises';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { bytesToHex } from '@noble/hashes/utils.js';

export const CHROMIUM = '/usr/bin/chromium';
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'];

export const launch = (): Promise<Browser> => chromium.launch({ executablePath: CHROMIUM, headless: true, args: ARGS });

/** A fresh context (own localStorage) whose page errors fail the test through `errors`. A 403 from
 *  GET /api/agents is expected: it is how the console learns that a key may not own agents. */
export async function newPage(browser: Browser, viewport = { width: 1200, height: 900 }): Promise<{ context: BrowserContext; page: Page; errors: string[] }> {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error' && !(m.location().url.endsWith('/api/agents') && m.text().includes('403'))) errors.push(m.text());
  });
  return { context, page, errors };
}

export async function screenshot(page: Page, name: string): Promise<void> {
  await mkdir('test-results', { recursive: true });
  await page.screenshot({ path: `test-results/console-${name}.png`, fullPage: true });
}

/** Signs in with the given secret key through "Secret key (nsec or hex)" / "Use this key". */
export async function signInWithKey(page: Page, sk: Uint8Array): Promise<void> {
  await page.getByLabel('Secret key (nsec or hex)').fill(bytesToHex(sk));
  await page.getByRole('button', { name: 'Use this key' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
}

/** The text of the Conversation log. */
export const conversation = (page: Page) => page.getByRole('log', { name: 'Conversation' });
