// The web console in headless Chromium against the echo instance of `wrangler dev` (local
// development: the demo agent answers with the offline echo model): sign-in with a local key, two
// turns with the demo agent, the conversation restored after a reload, escaping of untrusted text,
// the owner's live telemetry (signed in as the demo owner), bad input, phone width, and the page's
// Content-Security-Policy.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { sha256 } from '@noble/hashes/sha2.js';
import { finalizeEvent, getPublicKey } from 'nostr-tools/pure';
import { npubEncode } from 'nostr-tools/nip19';
import { ConversationKeyCache, decrypt, encrypt } from '../../src/shared/nip44.js';
import type { EventTemplate } from '../../src/shared/event.js';
import { conversation, launch, newPage, screenshot, signInWithKey } from './console-browser.js';

const httpUrl = inject('httpUrl');
const consoleUrl = `${httpUrl}/console`;
// The demo owner's key as workers/common/owners.ts derives it (that module is Worker code and does
// not typecheck under Node); checked against /health's demo block below.
const DEMO_OWNER_SK = sha256(new TextEncoder().encode('edgestr demo owner (local development only)'));
let demo: { owner: string; agent: string };

let browser: Browser;
beforeAll(async () => {
  browser = await launch();
  demo = ((await (await fetch(`${httpUrl}/health`)).json()) as { demo: { owner: string; agent: string } }).demo;
  expect(demo.owner).toBe(getPublicKey(DEMO_OWNER_SK));
});
afterAll(async () => {
  await browser?.close();
});

describe('the web console (echo instance)', () => {
  it('is served with a strict Content-Security-Policy and loads no other origin', async () => {
    const res = await fetch(consoleUrl);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    const ws = httpUrl.replace(/^http/, 'ws');
    expect(res.headers.get('content-security-policy')).toBe(
      `default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self' ${ws}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
    );
    const html = await res.text();
    expect(html).not.toMatch(/https?:\/\//);
    const js = await fetch(`${consoleUrl}/console.js`);
    expect(js.status).toBe(200);
    expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect((await js.text()).length).toBeGreaterThan(1000);
    expect((await fetch(`${consoleUrl}/nope.js`)).status).toBe(404);
    // The relay, NIP-11 and /health still reach the Worker.
    expect((await fetch(`${httpUrl}/health`)).status).toBe(200);
    const nip11 = await fetch(`${httpUrl}/`, { headers: { Accept: 'application/nostr+json' } });
    expect(((await nip11.json()) as { software?: string }).software).toBeDefined();
  });

  it('signs in with a local key, talks to the demo agent over two turns, and restores the conversation after a reload', async () => {
    const { context, page, errors } = await newPage(browser);
    const requests: string[] = [];
    page.on('request', (r) => requests.push(r.url()));
    await page.goto(consoleUrl);
    await page.getByRole('button', { name: 'Use a local key' }).click();
    const npub = await page.getByText(/^npub1[a-z0-9]{58}$/).textContent();
    expect(npub).toMatch(/^npub1/);

    await page.getByRole('status').getByText('new conversation').waitFor();
    // The demo agent is preselected in local development.
    const agent = page.getByRole('combobox', { name: 'Agent', exact: true });
    expect(await agent.inputValue()).toBe(demo.agent);
    const log = conversation(page);

    const message = page.getByRole('textbox', { name: 'Message' });
    await message.fill('hello from the console');
    await page.getByRole('button', { name: 'Send', exact: true }).click();
    await log.getByText('echo: hello from the console').waitFor();
    await message.fill('a **second** turn with `code`');
    await page.getByRole('button', { name: 'Send', exact: true }).click();
    await log.getByText(/echo: a/).waitFor();
    expect(await log.locator('strong').last().textContent()).toBe('second');
    expect(await log.locator('code').last().textContent()).toBe('code');
    await screenshot(page, 'chat');

    await page.reload();
    await log.getByText('echo: hello from the console').waitFor();
    await page.getByRole('status').getByText('2 earlier messages restored').waitFor();
    const text = await log.textContent();
    expect(text).toContain('hello from the console');
    expect(text).toContain('second');
    expect(text!.indexOf('hello from the console')).toBeLessThan(text!.indexOf('second'));
    // The same key after the reload (kept in localStorage).
    expect(await page.getByText(/^npub1[a-z0-9]{58}$/).textContent()).toBe(npub);
    expect(requests.every((u) => u.startsWith(httpUrl) || u.startsWith(httpUrl.replace(/^http/, 'ws')))).toBe(true);
    expect(errors).toEqual([]);

    // Sign out forgets the key: the sign-in choice is back, and a new key starts a new conversation.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('button', { name: 'Use a local key' }).click();
    await page.getByRole('status').getByText('new conversation').waitFor();
    expect(await page.getByText(/^npub1[a-z0-9]{58}$/).textContent()).not.toBe(npub);
    await context.close();
  });

  it('shows untrusted text as text: markup in an answer never becomes elements', async () => {
    const { context, page, errors } = await newPage(browser);
    await page.goto(consoleUrl);
    await page.getByRole('button', { name: 'Use a local key' }).click();
    await page.getByRole('status').getByText('new conversation').waitFor();
    const evil = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>';
    await page.getByRole('textbox', { name: 'Message' }).fill(evil);
    await page.getByRole('button', { name: 'Send', exact: true }).click();
    const log = conversation(page);
    await log.getByText(`echo: ${evil}`).waitFor();
    expect(await log.locator('img, script').count()).toBe(0);
    expect(await page.evaluate(() => (window as unknown as { pwned?: number }).pwned)).toBeUndefined();
    expect(errors).toEqual([]);
    await context.close();
  });

  it('refuses bad input with the reason the user can act on', async () => {
    const { context, page } = await newPage(browser);
    await page.goto(consoleUrl);
    await page.getByLabel('Secret key (nsec or hex)').fill('nsec1notakey');
    await page.getByRole('button', { name: 'Use this key' }).click();
    expect(await page.getByRole('alert').textContent()).toBe('not a valid nsec: Unknown letter: "o". Allowed: qpzry9x8gf2tvdw0s3jn54khce6mua7l');
    await page.getByLabel('Secret key (nsec or hex)').fill('1234');
    await page.getByRole('button', { name: 'Use this key' }).click();
    expect(await page.getByRole('alert').textContent()).toBe('a secret key is an nsec1… string or 64 hex digits');

    await page.getByRole('button', { name: 'Use a local key' }).click();
    await page.getByLabel('Other agent (npub or hex)').fill('npub1nope');
    await page.getByRole('button', { name: 'Add agent' }).click();
    expect(await page.getByRole('alert').textContent()).toBe('an agent is named by its npub or 64-hex public key');
    // A key that may not own agents sees no owner panel, but the server's reason in the owner area (sign-up is not open here).
    expect(await page.getByRole('log', { name: 'Telemetry' }).count()).toBe(0);
    const owner = page.getByRole('region', { name: 'Your agents' });
    expect(await owner.getByRole('status').textContent()).toBe('this pubkey is not an owner on this deployment; ask the operators to add it');
    expect(await owner.getByRole('button', { name: 'Create agent' }).count()).toBe(0);
    await context.close();
  });

  it('shows the demo owner its agent and the live NIP-AO telemetry of a run', async () => {
    const { context, page, errors } = await newPage(browser);
    await page.goto(consoleUrl);
    await signInWithKey(page, DEMO_OWNER_SK);
    const agents = page.getByRole('list', { name: 'Your agents' });
    await agents.getByText('edgestr demo agent', { exact: true }).waitFor();
    await page.getByText('watching your agents’ telemetry').waitFor();
    await page.getByRole('status').getByText(/new conversation|restored/).waitFor();

    await page.getByRole('textbox', { name: 'Message' }).fill('watched by the owner');
    await page.getByRole('button', { name: 'Send', exact: true }).click();
    await conversation(page).getByText('echo: watched by the owner').waitFor();
    const telemetry = page.getByRole('log', { name: 'Telemetry' });
    await telemetry.getByText(/turn_started/).first().waitFor();
    await telemetry.getByText(/acp_write/).first().waitFor();
    await telemetry.getByText(/acp_read/).first().waitFor();
    expect(await telemetry.getByRole('button', { name: 'cancel_turn' }).count()).toBeGreaterThan(0);
    expect(await page.getByText(/^frames \d+ · missing 0 · reported drops 0 · rejected 0$/).count()).toBe(1);
    await screenshot(page, 'owner');
    expect(errors).toEqual([]);
    await context.close();
  });

  it('signs in with a NIP-07 extension when one is present, and says telemetry needs a local key', async () => {
    const { context, page, errors } = await newPage(browser);
    // A NIP-07 provider as an extension injects it: window.nostr, here backed by the demo owner's
    // key held in Node (the page never sees the key).
    const keys = new ConversationKeyCache(8);
    await page.exposeFunction('nip07Sign', (t: EventTemplate) => finalizeEvent(t, DEMO_OWNER_SK));
    await page.exposeFunction('nip07Encrypt', (peer: string, text: string) => encrypt(text, keys.get(DEMO_OWNER_SK, peer)));
    await page.exposeFunction('nip07Decrypt', (peer: string, payload: string) => {
      const r = decrypt(payload, keys.get(DEMO_OWNER_SK, peer));
      if (!r.ok) throw new Error(r.error);
      return r.value;
    });
    await page.addInitScript((pubkey: string) => {
      const w = window as unknown as Record<string, (...a: unknown[]) => Promise<unknown>> & { nostr?: unknown };
      w.nostr = {
        getPublicKey: async () => pubkey,
        signEvent: (t: unknown) => w.nip07Sign!(t),
        nip44: { encrypt: (p: unknown, t: unknown) => w.nip07Encrypt!(p, t), decrypt: (p: unknown, c: unknown) => w.nip07Decrypt!(p, c) },
      };
    }, demo.owner);
    await page.goto(consoleUrl);
    await page.getByText('A NIP-07 extension was found: sign in with it, or use a key kept in this browser.').waitFor();
    await page.getByRole('button', { name: 'Sign in with extension' }).click();
    expect(await page.getByText(/^npub1[a-z0-9]{58}$/).textContent()).toBe(npubEncode(demo.owner));
    await page.getByRole('status').getByText(/new conversation|restored/).waitFor();
    await page.getByRole('textbox', { name: 'Message' }).fill('signed by the extension');
    await page.getByRole('button', { name: 'Send', exact: true }).click();
    await conversation(page).getByText('echo: signed by the extension').waitFor();
    await page.getByText('Live telemetry needs a local key: a NIP-07 extension cannot open NIP-AO frames here.').waitFor();
    // Nothing of the extension's key was stored in the browser.
    expect(await page.evaluate(() => localStorage.getItem('edgestr.console.key'))).toBeNull();
    expect(errors).toEqual([]);
    await context.close();
  });

  it('is usable at phone width (375 px): no horizontal scrolling, the composer in view, a turn works', async () => {
    const { context, page, errors } = await newPage(browser, { width: 375, height: 740 });
    await page.goto(consoleUrl);
    await page.getByRole('button', { name: 'Use a local key' }).click();
    await page.getByRole('status').getByText('new conversation').waitFor();
    const widths = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth }));
    expect(widths.scroll).toBeLessThanOrEqual(widths.client);
    const message = page.getByRole('textbox', { name: 'Message' });
    await message.scrollIntoViewIfNeeded();
    const box = await message.boundingBox();
    expect(box!.x).toBeGreaterThanOrEqual(0);
    expect(box!.x + box!.width).toBeLessThanOrEqual(375);
    const send = await page.getByRole('button', { name: 'Send', exact: true }).boundingBox();
    expect(send!.x + send!.width).toBeLessThanOrEqual(375);
    expect(send!.height).toBeGreaterThanOrEqual(36);
    await message.fill('from a phone');
    await page.getByRole('button', { name: 'Send', exact: true }).click();
    await conversation(page).getByText('echo: from a phone').waitFor();
    await screenshot(page, 'phone');
    expect(errors).toEqual([]);
    await context.close();
  });
});
