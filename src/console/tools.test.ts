// The console's tools panel (tools.ts) in headless Chromium (test/e2e/console-browser.ts), served
// with its markup by a fake relay (test/helpers-node/fake-relay.ts) that stands for the public shard
// and a hostile DVMCP server announced on it: one call answered by 1,500 progress notifications (a
// line each in the output log, for as long as a call may last), one by a result whose content nests
// 6,000 levels deep.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { build } from 'esbuild';
import { finalizeEvent, generateSecretKey } from 'nostr-tools/pure';
import type { Browser, Page } from 'playwright-core';
import { fakeRelay, type FakeRelay } from '../../test/helpers-node/fake-relay.js';
import { launch } from '../../test/e2e/console-browser.js';
import type { NostrEvent } from '../shared/event.js';
import { KIND } from '../shared/kinds.js';

const provider = generateSecretKey();
const sign = (kind: number, tags: string[][], content: string): NostrEvent => finalizeEvent({ kind, created_at: Math.floor(Date.now() / 1000), tags, content }, provider);
const PROGRESS = 1_500;
const DEEP = `${'['.repeat(6000)}${']'.repeat(6000)}`;

const MARKUP = `<button type="button" id="tools-refresh">Find tools</button>
<ul id="tool-list" aria-label="Announced tools"></ul>
<form id="tool-form" aria-labelledby="tool-form-title" hidden><h3 id="tool-form-title"></h3><div id="tool-fields"></div><button type="submit">Call tool</button></form>
<div id="tool-output" role="log" aria-label="Tool output"></div>`;

let relay: FakeRelay;
let browser: Browser;
let page: Page;

/** The hostile server: `chatty` reports progress PROGRESS times, then answers; `deep` answers with content nested 6,000 levels. */
function server(e: NostrEvent, r: FakeRelay): void {
  if (e.kind !== KIND.DVMCP_REQUEST) return;
  const { params } = JSON.parse(e.content) as { params: { name: string } };
  const to = [['p', e.pubkey], ['e', e.id]];
  if (params.name === 'chatty') {
    for (let i = 1; i <= PROGRESS; i++) r.deliver(sign(KIND.DVMCP_NOTIFICATION, to, JSON.stringify({ method: 'notifications/progress', params: { progress: i, total: PROGRESS } })));
    r.deliver(sign(KIND.DVMCP_RESPONSE, to, JSON.stringify({ content: [{ type: 'text', text: 'done' }] })));
  } else r.deliver(sign(KIND.DVMCP_RESPONSE, to, `{"content":[{"type":"resource","x":${DEEP}}],"structuredContent":{"x":${DEEP}}}`));
}

beforeAll(async () => {
  const bundled = await build({
    stdin: { contents: "import { ToolsPanel } from './tools.ts'; new ToolsPanel();", resolveDir: import.meta.dirname, loader: 'ts' },
    bundle: true,
    format: 'iife',
    platform: 'browser',
    target: 'es2022',
    write: false,
    logLevel: 'warning',
  });
  relay = await fakeRelay({
    onEvent: server,
    onHttp: (req, res) => {
      if (req.headers.accept === 'application/nostr+json') return void res.writeHead(200, { 'content-type': 'application/nostr+json' }).end('{"bridge_providers":[]}');
      if (req.url === '/tools.js') return void res.writeHead(200, { 'content-type': 'text/javascript' }).end(bundled.outputFiles[0]!.text);
      res.writeHead(200, { 'content-type': 'text/html' }).end(`<!doctype html><body>${MARKUP}<script src="/tools.js"></script></body>`);
    },
  });
  relay.stored.push(
    sign(KIND.DVMCP_SERVER, [['d', 'srv'], ['name', 'Hostile']], JSON.stringify({ capabilities: { tools: {} } })),
    sign(KIND.DVMCP_TOOLS, [['d', 'srv/tools/list'], ['s', 'srv']], JSON.stringify({ tools: [{ name: 'chatty', inputSchema: { type: 'object' } }, { name: 'deep', inputSchema: { type: 'object' } }] })),
  );
  browser = await launch();
  page = await browser.newPage();
  await page.goto(`${relay.url}/console`);
  await page.getByRole('button', { name: 'Find tools' }).click();
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await relay?.close();
});

const output = () => page.getByRole('log', { name: 'Tool output' });

describe('tools panel: a hostile DVMCP server', () => {
  it(`${PROGRESS} progress notifications: the output log keeps its last 500 lines`, async () => {
    await page.getByRole('button', { name: 'Use srv/chatty', exact: true }).click();
    await page.getByRole('button', { name: 'Call tool' }).click();
    await output().getByText('result: done').waitFor({ timeout: 30_000 });
    const lines = await output().locator('.line').allTextContents();
    expect(lines).toHaveLength(500);
    expect(lines.slice(0, 2)).toEqual([`progress ${PROGRESS - 498}/${PROGRESS}`, `progress ${PROGRESS - 497}/${PROGRESS}`]);
    expect(lines.at(-1)).toBe('result: done');
  }, 60_000);

  it('a result nested 6,000 levels deep: a line saying so, not an exception', async () => {
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.getByRole('button', { name: 'Use srv/deep', exact: true }).click();
    await page.getByRole('button', { name: 'Call tool' }).click();
    await output().getByText('result: (nests deeper than 64 levels: not shown)').waitFor({ timeout: 10_000 });
    expect(errors).toEqual([]);
  }, 30_000);
});
