// What strangers write reaches the terminal only as visible text: `edgestr tools`, `call` and `ask`
// run through main() against a fake relay (test/helpers-node/fake-relay.ts) serving real signed
// announcements, DVMCP answers and agent events whose fields carry terminal escape sequences (OSC 0
// window title, OSC 52 clipboard write, CSI 2J clear screen, the C1 CSI U+009B, a lone CR), and a
// relay whose refusals (CLOSED, OK false) carry them into the DVMCP client's warnings. And what
// `ask` ends with is the agent's answer (the 25803), whatever its deltas were: a lost one, a stream
// that is not the answer's beginning, deltas after the terminal.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';
import { fakeRelay, type FakeRelay } from '../../test/helpers-node/fake-relay.js';
import type { NostrEvent } from '../shared/event.js';
import { bytesToHex } from '../shared/hex.js';
import { KIND } from '../shared/kinds.js';
import { decrypt, encrypt, getConversationKey } from '../shared/nip44.js';
import { runCli } from '../../test/helpers-node/run-cli.js';

const ESC = '\x1b';
const BEL = '\x07';
const CSI = '\u009b';
/** Window title, clipboard write, clear screen (7-bit and C1 forms). */
const EVIL = `${ESC}]0;pwned${BEL}${ESC}]52;c;Y3VybCBldmlsfHNo${BEL}${ESC}[2J${CSI}2J ok`;
/** EVIL as the terminal must show it. */
const SHOWN = String.raw`\u001b]0;pwned\u0007\u001b]52;c;Y3VybCBldmlsfHNo\u0007\u001b[2J\u009b2J ok`;
/** An invoice of 5 sats carrying EVIL (lower case, as BOLT-11 is read, so the client takes it as 5 sats), and as shown. */
const EVIL_INVOICE = `lnbc50n1${EVIL.toLowerCase()}`;
const SHOWN_INVOICE = `lnbc50n1${SHOWN.toLowerCase()}`;

const now = (): number => Math.floor(Date.now() / 1000);
const sign = (sk: Uint8Array, kind: number, tags: string[][], content: string): NostrEvent => ({ ...finalizeEvent({ kind, created_at: now(), tags, content }, sk) });

const run = (argv: string[], env: Record<string, string> = {}) => runCli(argv, { EDGESTR_KEY: bytesToHex(generateSecretKey()), ...env });

/** No raw control that a terminal acts on: C0 other than \n and \t, DEL, C1; a CR only before a LF. */
function expectTerminalSafe(text: string): void {
  expect(text.replace(/\r\n/g, '\n')).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/);
}

const provider = generateSecretKey();
const agent = generateSecretKey();
const agentPk = getPublicKey(agent);
let relay: FakeRelay;

/** Requests for `forecast` waiting for their payment (the CLI's POST /api/bridge/pay). */
const unpaid: Array<() => void> = [];

/**
 * The fake DVMCP server: `forecast` asks 5 sats and, once the client tried to pay, reports
 * progress and answers; `priced` only asks; `broken` fails.
 */
function dvmcpServer(e: NostrEvent, r: FakeRelay): void {
  const { params } = JSON.parse(e.content) as { params: { name: string } };
  const to = [['p', e.pubkey], ['e', e.id]];
  if (params.name === 'broken') return r.deliver(sign(provider, KIND.DVMCP_RESPONSE, to, JSON.stringify({ error: { code: -32000, message: `bad\n${EVIL}` } })));
  r.deliver(sign(provider, KIND.DVMCP_NOTIFICATION, [...to, ['status', 'payment-required'], ['amount', '5', EVIL_INVOICE]], ''));
  if (params.name !== 'forecast') return;
  unpaid.push(() => {
    r.deliver(sign(provider, KIND.DVMCP_NOTIFICATION, to, JSON.stringify({ method: 'notifications/progress', params: { progress: 1, total: 2, message: EVIL } })));
    r.deliver(sign(provider, KIND.DVMCP_RESPONSE, to, JSON.stringify({ content: [{ type: 'text', text: `line 1\n${EVIL}\rline 2` }] })));
  });
}

/**
 * NIP-11 of the public shard (naming the fake server's key as this deployment's bridge); anything
 * else: not a local invoice (404), and the call is answered a moment later, once the CLI showed the invoice.
 */
function payRoute(req: IncomingMessage, res: ServerResponse): void {
  if (req.url === '/' && req.headers.accept === 'application/nostr+json') {
    res.writeHead(200, { 'content-type': 'application/nostr+json' }).end(JSON.stringify({ bridge_providers: [getPublicKey(provider)] }));
    return;
  }
  res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'not a local invoice' }));
  if (req.url === '/api/bridge/pay') setTimeout(() => unpaid.splice(0).forEach((answer) => answer()), 200);
}

/** What the fake agent sends for prompts that test the final render: deltas (by seq) and the answer, in order. */
const RENDER_RUNS: Record<string, Array<{ seq: number; text: string } | { answer: string }>> = {
  // delta 1 lost (deltas are not stored: one sent while the client reconnects is gone)
  'lost delta': [{ seq: 0, text: 'The answer ' }, { seq: 2, text: '42.' }, { answer: 'The answer is 42.' }],
  // the answer cut to fit an event (the agent's fitResponse): the stream is not its beginning
  'cut answer': [{ seq: 0, text: 'The answer is 4' }, { seq: 1, text: '2, and more' }, { answer: 'The answer is 4 [cut]' }],
  // a delta, status and a tool call after the terminal event
  'late delta': [{ seq: 0, text: 'The answer ' }, { answer: 'The answer is 42.' }, { seq: 1, text: 'is 43!' }],
};

/** The fake agent: status, a tool call, deltas, then a response (or an error when asked to fail; RENDER_RUNS for those prompts). */
function agentRuns(e: NostrEvent, r: FakeRelay): void {
  const key = getConversationKey(agent, e.pubkey);
  const { message } = JSON.parse((decrypt(e.content, key) as { ok: true; value: string }).value) as { message: string };
  const tags = [['p', e.pubkey], ['e', e.id, '', 'root']];
  const send = (kind: number, payload: object): void => r.deliver(sign(agent, kind, tags, encrypt(JSON.stringify({ ver: 1, ...payload }), key)));
  const scripted = RENDER_RUNS[message];
  if (scripted) {
    for (const step of scripted) {
      if ('answer' in step) send(KIND.AI_RESPONSE, { text: step.answer });
      else send(KIND.AI_DELTA, step);
    }
    if (message === 'late delta') {
      send(KIND.AI_STATUS, { state: 'thinking', info: 'late' });
      send(KIND.AI_TOOL_CALL, { name: 'late', phase: 'start' });
    }
    return;
  }
  if (message === 'deep tool') {
    // Tool-call arguments nested 6,000 levels (about 12 KB, written as text: JSON.stringify of them overflows the stack).
    const deep = `{"ver":1,"name":"deep","phase":"start","arguments":{"a":${'['.repeat(6000)}${']'.repeat(6000)}}}`;
    r.deliver(sign(agent, KIND.AI_TOOL_CALL, tags, encrypt(deep, key)));
    send(KIND.AI_RESPONSE, { text: 'done' });
    return;
  }
  if (message === 'tool failed') {
    // What the agent's runtime sends for a failed tool: the reason in output.stderr, no text.
    send(KIND.AI_TOOL_CALL, { name: 'web_fetch', phase: 'result', success: false, output: { stdout: '', stderr: 'refused: example.org is not in the allowlist', exit_code: 1 } });
    send(KIND.AI_TOOL_CALL, { name: 'mcp', phase: 'result', success: false, output: { stdout: '', stderr: `upstream said:\n${EVIL}\n`, exit_code: 1 } });
    send(KIND.AI_TOOL_CALL, { name: 'calculator', phase: 'result', success: true, output: { stdout: '42', stderr: 'a warning', exit_code: 0 } });
    send(KIND.AI_RESPONSE, { text: 'done' });
    return;
  }
  send(KIND.AI_STATUS, { state: 'thinking', info: EVIL });
  send(KIND.AI_TOOL_CALL, { name: `calc${CSI}2J`, phase: 'start', arguments: { q: EVIL }, text: EVIL });
  const deltas = ['line 1\n', EVIL, '\rover', 'written\r', '\nend\u2028'];
  deltas.forEach((text, seq) => send(KIND.AI_DELTA, { text, seq }));
  if (message === 'fail') send(KIND.AI_ERROR, { code: 'INTERNAL_ERROR', message: `failed:\n${EVIL}` });
  else send(KIND.AI_RESPONSE, { text: deltas.join('') });
}

beforeAll(async () => {
  relay = await fakeRelay({
    onEvent: (e, r) => {
      if (e.kind === KIND.DVMCP_REQUEST) dvmcpServer(e, r);
      if (e.kind === KIND.AI_PROMPT) agentRuns(e, r);
    },
    onHttp: payRoute,
  });
  relay.stored.push(
    sign(provider, KIND.DVMCP_SERVER, [['d', 'weather'], ['name', `Weather${ESC}[31m\nprovider ${'0'.repeat(64)}`]], JSON.stringify({ capabilities: { tools: {} } })),
    sign(
      provider,
      KIND.DVMCP_TOOLS,
      [['d', 'weather/tools/list'], ['s', 'weather'], ['cap', 'forecast', `5${BEL}`, `sats${CSI}2J`]],
      JSON.stringify({ tools: [{ name: 'forecast', description: EVIL, inputSchema: { type: 'object' } }, { name: `x${ESC}]0;t${BEL}`, inputSchema: { type: 'object' } }] }),
    ),
    sign(agent, KIND.RELAY_LIST, [['r', `ws://127.0.0.1:${new URL(relay.url).port}/r/${agentPk}`]], ''),
  );
});

afterAll(() => relay.close());

describe('text from strangers is shown escaped', () => {
  it('tools: server name, tool names, descriptions and prices', async () => {
    const r = await run(['tools', '--url', relay.url]);
    expect(r.code).toBe(0);
    expectTerminalSafe(r.stdout);
    expect(r.stdout).toContain(String.raw`weather  Weather\u001b[31m\u000aprovider ${'0'.repeat(64)}  provider ${getPublicKey(provider)}`);
    expect(r.stdout).toContain(String.raw`  forecast  [5\u0007 sats\u009b2J]  ${SHOWN}`);
    expect(r.stdout).toContain(String.raw`  x\u001b]0;t\u0007`);
  });

  it('tools --json: every string kept, C1 and U+2028/2029 escaped as JSON', async () => {
    const r = await run(['tools', '--url', relay.url, '--json']);
    expect(r.code).toBe(0);
    expectTerminalSafe(r.stdout);
    const server = JSON.parse(r.stdout) as { name: string; tools: Array<{ name: string; description?: string; price?: { unit: string } }> };
    expect(server.name).toBe(`Weather${ESC}[31m\nprovider ${'0'.repeat(64)}`);
    expect(server.tools[0]).toMatchObject({ description: EVIL, price: { unit: `sats${CSI}2J` } });
    expect(r.stdout).toContain(String.raw`\u009b2J`);
  });

  it('call: invoice, progress and the tool output', async () => {
    const r = await run(['call', 'weather', 'forecast', '--url', relay.url, '--max-sats', '10']);
    expect(r.code).toBe(0);
    expectTerminalSafe(r.stdout);
    expectTerminalSafe(r.stderr);
    expect(r.stderr).toContain(`[pay this invoice with your wallet; waiting for the payment: ${SHOWN_INVOICE}]`);
    expect(r.stderr).toContain(`[progress 1/2 ${SHOWN}]`);
    expect(r.stdout).toBe(`line 1\n${SHOWN}\\u000dline 2\n`);
  });

  it('call: a declined invoice and an error message', async () => {
    const declined = await run(['call', 'weather', 'priced', '--url', relay.url]);
    expect(declined.code).toBe(3);
    expectTerminalSafe(declined.stderr);
    expect(declined.stderr).toContain(`error payment: payment required: 5 sats (invoice ${SHOWN_INVOICE}) (not paid: --max-sats 0)`);
    const broken = await run(['call', 'weather', 'broken', '--url', relay.url]);
    expect(broken.code).toBe(3);
    expectTerminalSafe(broken.stderr);
    expect(broken.stderr).toContain(`error protocol: bad\n${SHOWN}\n`);
  });

  it("a relay's refusals quoted in the DVMCP client's warnings (CLOSED of its REQ, OK false of its cancel)", async () => {
    const refusing = await fakeRelay({
      onEvent: (e, r) => {
        if (e.kind === KIND.DVMCP_REQUEST) dvmcpServer(e, r);
      },
      onHttp: payRoute,
      refuseReq: (filters) => (filters.some((f) => f['#e'] !== undefined) ? `blocked: ${EVIL}` : undefined),
      refuseEvent: (e) => (e.kind === KIND.DVMCP_NOTIFICATION ? `blocked: ${EVIL}` : undefined),
    });
    refusing.stored.push(...relay.stored);
    try {
      const r = await run(['call', 'weather', 'priced', '--url', refusing.url]);
      expect(r.code).toBe(3);
      expectTerminalSafe(r.stderr);
      const url = refusing.url.replace(/^http/, 'ws');
      expect(r.stderr).toContain(`dvmcp-client: ${url}/ refused the subscription to answers by request id: blocked: ${SHOWN}\n`);
      expect(r.stderr).toMatch(/dvmcp-client: cancel of [0-9a-f]{64} not delivered: /);
      expect(r.stderr).toContain(` not delivered: ${url}/: blocked: ${SHOWN}\n`);
    } finally {
      await refusing.close();
    }
  });

  it('ask: deltas, status, tool calls and the answer (a lone CR escaped, CRLF kept, even split across deltas)', async () => {
    const r = await run(['ask', agentPk, 'hello', '--url', relay.url]);
    expect(r.code).toBe(0);
    expectTerminalSafe(r.stdout);
    expectTerminalSafe(r.stderr);
    expect(r.stdout).toBe(`line 1\n${SHOWN}\\u000doverwritten\r\nend\u2028\n`);
    expect(r.stderr).toContain(`[thinking: ${SHOWN}]`);
    expect(r.stderr).toContain(String.raw`[tool calc\u009b2J start {"q":"\u001b]0;pwned\u0007\u001b]52;c;Y3VybCBldmlsfHNo\u0007\u001b[2J\u009b2J ok"}: ` + `${SHOWN}]`);
  });

  it("ask: a failed tool call shows why (its output's stderr, on one line, escaped)", async () => {
    const r = await run(['ask', agentPk, 'tool failed', '--url', relay.url]);
    expect(r.code).toBe(0);
    expectTerminalSafe(r.stderr);
    expect(r.stderr).toContain('[tool web_fetch result failed: refused: example.org is not in the allowlist]\n');
    expect(r.stderr).toContain(`[tool mcp result failed: upstream said:\\u000a${SHOWN}]\n`);
    expect(r.stderr).toContain('[tool calculator result]\n');
  });

  it('ask: tool-call arguments nesting 6,000 levels are not shown (a note instead), and the answer still prints', async () => {
    const r = await run(['ask', agentPk, 'deep tool', '--url', relay.url]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('done\n');
    expect(r.stderr).toContain('[tool deep start (nests deeper than 64 levels: not shown)]\n');
  });

  it('ask: an error message; --json keeps the text and escapes C1 and U+2028', async () => {
    const failed = await run(['ask', agentPk, 'fail', '--url', relay.url]);
    expect(failed.code).toBe(3);
    expectTerminalSafe(failed.stderr);
    expect(failed.stderr).toContain(`error INTERNAL_ERROR: failed:\n${SHOWN}\n`);
    const json = await run(['ask', agentPk, 'hello', '--url', relay.url, '--json']);
    expect(json.code).toBe(0);
    expectTerminalSafe(json.stdout);
    expect(json.stdout).not.toMatch(/[\u2028\u2029]/);
    const lines = json.stdout.trim().split('\n').map((l) => JSON.parse(l) as { type: string; text?: string });
    expect(lines.filter((l) => l.type === 'delta').map((l) => l.text)).toEqual(['line 1\n', EVIL, '\rover', 'written\r', '\nend\u2028']);
    expect(lines.at(-1)).toMatchObject({ type: 'response', text: `line 1\n${EVIL}\roverwritten\r\nend\u2028` });
  });
});

// NIP-XX: "Final render MUST be taken from ai.response text, not from the delta stream" and "Clients
// MUST NOT apply deltas after a terminal event has been accepted for a run".
describe("ask prints the agent's answer, not the stream", () => {
  it('a delta lost (seq 0 and 2 arrive): the rest of the answer after what was streamed', async () => {
    const r = await run(['ask', agentPk, 'lost delta', '--url', relay.url]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('The answer is 42.\n');
    expect(r.stderr).not.toContain('differs');
  });

  it('a stream that is not the beginning of the answer: a note on stderr, then the whole answer', async () => {
    const r = await run(['ask', agentPk, 'cut answer', '--url', relay.url]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('The answer is 42, and more\nThe answer is 4 [cut]\n');
    expect(r.stderr).toContain("[the streamed text differs from the agent's answer; the answer follows]\n");
  });

  it('a delta, status and a tool call after the terminal event are not shown', async () => {
    const r = await run(['ask', agentPk, 'late delta', '--url', relay.url]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('The answer is 42.\n');
    expect(r.stderr).not.toContain('late');
  });
});

// JSON that nests too deep for JSON.stringify (a RangeError past a few thousand levels) comes from
// strangers too: a DVMCP announcement's inputSchema, a server's result, a relay's NIP-11 document.
// Each is written here as text (JSON.parse reads it; JSON.stringify of it would throw).
describe('JSON from strangers that nests 6,000 levels deep', () => {
  /** `[` 6,000 times, then `]` as often: 12,000 bytes, under every size bound. */
  const DEEP = `${'['.repeat(6000)}${']'.repeat(6000)}`;
  const stranger = generateSecretKey();
  let deep: FakeRelay;

  beforeAll(async () => {
    deep = await fakeRelay({
      onEvent: (e, r) => {
        if (e.kind !== KIND.DVMCP_REQUEST) return;
        const to = [['p', e.pubkey], ['e', e.id]];
        const texty = (JSON.parse(e.content) as { params?: { name?: string } }).params?.name === 'texty';
        r.deliver(sign(stranger, KIND.DVMCP_RESPONSE, to, `{"content":${texty ? '[{"type":"text","text":"ok"}]' : '[]'},"structuredContent":{"x":${DEEP}}}`));
      },
      onHttp: (req, res) => {
        const body = req.url === '/deep' ? `{"name":"deep","x":${DEEP}}` : req.url === '/large' ? JSON.stringify({ name: 'large', x: Array.from({ length: 20_000 }, (_, i) => [i]) }) : '{}';
        res.writeHead(200, { 'content-type': 'application/nostr+json' }).end(body);
      },
    });
    deep.stored.push(
      sign(stranger, KIND.DVMCP_SERVER, [['d', 'nest']], JSON.stringify({ capabilities: { tools: {} } })),
      sign(stranger, KIND.DVMCP_TOOLS, [['d', 'nest/tools/list'], ['s', 'nest']], `{"tools":[{"name":"deep","inputSchema":{"type":"object","properties":{"x":{"default":${DEEP}}}}},{"name":"flat","inputSchema":{"type":"object"}},{"name":"texty","inputSchema":{"type":"object"}}]}`),
      sign(stranger, KIND.DVMCP_SERVER, [['d', 'deepinfo']], `{"capabilities":{"tools":{}},"serverInfo":{"name":"s","x":${DEEP}}}`),
    );
  });
  afterAll(() => deep.close());

  it('tools --json: exit 0, the tool that nests too deep left out (its server and the other tool kept), and the server that does', async () => {
    const r = await run(['tools', '--url', deep.url, '--json']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const servers = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as { id: string; tools: Array<{ name: string }> });
    expect(servers.map((s) => [s.id, s.tools.map((t) => t.name)])).toEqual([['nest', ['flat', 'texty']]]);
  });

  it("call: a server's result without text that nests too deep is an error (exit 5), not a crash, in text and --json", async () => {
    const why = { text: 'the result of flat on nest nests deeper than 64 levels', json: 'the answer nests deeper than 128 levels' };
    for (const mode of ['text', 'json'] as const) {
      const r = await run(['call', 'nest', 'flat', '--url', deep.url, ...(mode === 'json' ? ['--json'] : [])]);
      expect(r.code).toBe(5);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(new RegExp(`^\\[calling flat on nest, provider npub1\\S+ \\(not one of this deployment's bridges\\)\\]\\nedgestr: ${why[mode]}, this client's limit\\n$`));
    }
  });

  it("call: a result with text content prints its text whatever its structuredContent's depth; --json of it is refused (exit 5)", async () => {
    const text = await run(['call', 'nest', 'texty', '--url', deep.url]);
    expect([text.code, text.stdout]).toEqual([0, 'ok\n']);
    const json = await run(['call', 'nest', 'texty', '--url', deep.url, '--json']);
    expect([json.code, json.stdout]).toEqual([5, '']);
    expect(json.stderr).toContain("edgestr: the answer nests deeper than 128 levels, this client's limit\n");
  });

  it('relay info: a NIP-11 document that nests too deep is refused (exit 5), in text and --json', async () => {
    for (const json of [[], ['--json']]) {
      const r = await run(['relay', 'info', `${deep.url}/deep`, ...json]);
      expect(r.code).toBe(5);
      expect(r.stdout).toBe('');
      expect(r.stderr).toBe(`edgestr: relay info ${deep.url}/deep: the NIP-11 document nests deeper than 64 levels, this client's limit\n`);
    }
  });

  it('relay info: a document over 64 KiB is printed compact, on one line, with a note (its pretty form is not built)', async () => {
    const r = await run(['relay', 'info', `${deep.url}/large`]);
    expect(r.code).toBe(0);
    expect(r.stdout.split('\n')).toHaveLength(2);
    expect(JSON.parse(r.stdout)).toMatchObject({ name: 'large' });
    expect(r.stderr).toMatch(/^\[the NIP-11 document is \d+ characters of JSON, over 65536: printed compact\]\n$/);
    const small = await run(['relay', 'info', deep.url]);
    expect(small).toEqual({ code: 0, stdout: '{}\n', stderr: '' });
  });
});

// A stranger's agent chooses the relay `ask` talks to it on (its relay list, kind 10002): one that
// never answers the conversation's subscription, one that ends it after its EOSE, one on a
// link-local address. `ask` fails with the reason (exit 5) instead of waiting for ever, or of
// dialling it. (--url is the fake relay on 127.0.0.1: a local deployment, so only link-local and
// the like are refused; src/client/agents.test.ts has the public deployment's choices.)
describe("ask: a hostile agent's relay", () => {
  const hostile = generateSecretKey();
  const hostilePk = getPublicKey(hostile);
  const shardOf = (r: FakeRelay): string => `ws://127.0.0.1:${new URL(r.url).port}/r/${hostilePk}`;
  const listing = (url: string): NostrEvent => sign(hostile, KIND.RELAY_LIST, [['r', url]], '');
  const isRunReq = (filters: Array<{ kinds?: number[] }>): boolean => filters.some((f) => f.kinds?.includes(KIND.AI_RESPONSE) === true);

  it('no EOSE for the REQ of the conversation: exit 5 after 10 s, not waiting for ever (--timeout 2 is for the answer)', async () => {
    const silent = await fakeRelay({ ignoreReq: isRunReq });
    silent.stored.push(listing(shardOf(silent)));
    try {
      const started = Date.now();
      const r = await run(['ask', hostilePk, 'hello', '--url', silent.url, '--timeout', '2']);
      expect(r).toEqual({ code: 5, stdout: '', stderr: `edgestr: subscription refused by ${shardOf(silent)}: no EOSE within 10000 ms\n` });
      expect(Date.now() - started).toBeLessThan(15_000);
    } finally {
      await silent.close();
    }
  }, 30_000);

  it("CLOSED after the EOSE (blocked: …): exit 5 at once with the relay's words, escaped", async () => {
    const closing = await fakeRelay({ closeOnEvent: (e) => (e.kind === KIND.AI_PROMPT ? `blocked: ${EVIL}` : undefined) });
    closing.stored.push(listing(shardOf(closing)));
    try {
      const started = Date.now();
      const r = await run(['ask', hostilePk, 'hello', '--url', closing.url]);
      expect(r).toEqual({ code: 5, stdout: '', stderr: `edgestr: subscription closed by ${shardOf(closing)}: blocked: ${SHOWN}\n` });
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      await closing.close();
    }
  });

  it('a relay list naming a link-local address (the cloud metadata one): exit 5, not dialled', async () => {
    const lister = await fakeRelay();
    lister.stored.push(listing(`ws://169.254.169.254/r/${hostilePk}`));
    try {
      const started = Date.now();
      const r = await run(['ask', hostilePk, 'hello', '--url', lister.url]);
      expect(r).toEqual({ code: 5, stdout: '', stderr: `edgestr: the agent's relay ws://169.254.169.254/r/${hostilePk} is not dialled: 169.254.169.254 is a link-local address\n` });
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      await lister.close();
    }
  });
});
