// The agent's own tools inside workerd: the calculator (table of results and exact errors, no
// eval), web_fetch against the real local fixture server of test/mcp/global-setup.ts (allowlist,
// private-address table, redirects, size limit, timeouts, content types), the MCP tools against
// the real @modelcontextprotocol/server-everything and the fixture's hand-written MCP endpoints,
// and the registry.

import { afterAll, beforeAll, describe, expect, it, inject, vi } from 'vitest';
import '../mcp/provided.js';
import { argsCheck } from '../../workers/agent/tools/args.js';
import { CALCULATOR_DEFINITION, CalculatorTool, calculate } from '../../workers/agent/tools/calculator.js';
import { classifyHost, hostAllowed, parseAllowlist, parseIPv4, parseIPv6 } from '../../src/shared/host-policy.js';
import { outboundPolicy } from '../../src/shared/outbound-url.js';
import { connectMcpServer, type McpConnection } from '../../workers/agent/tools/mcp.js';
import { MAX_MCP_DESCRIPTION_CHARS, MAX_MCP_INPUT_SCHEMA_CHARS, MAX_MCP_TOOL_LIST_CHARS, mcpToolName } from '../../workers/agent/tools/remote-tools.js';
import { McpSessionCache } from '../../workers/common/mcp-session-cache.js';
import { buildToolRunner } from '../../workers/agent/tools/registry.js';
import type { Tool, ToolResult } from '../../workers/agent/tools/types.js';
import { WebFetchTool } from '../../workers/agent/tools/web-fetch.js';

/** What the fixture's /mcp-expire counts per bucket (test/mcp/fixture-server.ts). */
type ExpireStats = { initializes: number; gets: number; calls: number };

const FIXTURE = inject('toolsFixtureUrl');
const EVERYTHING = inject('mcpEverythingUrl');
if (!FIXTURE || !EVERYTHING) {
  throw new Error("tools.test.ts needs test/mcp/global-setup.ts: add it to test.globalSetup in the vitest config");
}
const FIXTURE_PORT = new URL(FIXTURE).port;
// The local servers run on 127.0.0.1: web_fetch tests use the development policy (loopback and
// plain http allowed, so the per-tool allowlist decides); MCP tests the operator's explicit
// exception for 127.0.0.1 on every port, as the test bindings set it (EDGESTR_OUTBOUND_ALLOW).
const DEVELOPMENT = outboundPolicy({ EDGESTR_ENV: 'development' });
const LOCAL_SERVERS = outboundPolicy({ EDGESTR_OUTBOUND_ALLOW: '127.0.0.1:*' });

const never = (): AbortSignal => new AbortController().signal;
const ctx = () => ({ signal: never() });
const failure = (error: string): ToolResult => ({ ok: false, error, output: { stdout: '', stderr: error, exit_code: 1 } });
/** What the registry answers when `args` do not fit the tool's input schema (undefined: they do). */
const argsError = (tool: Tool | undefined, args: unknown): string | undefined => {
  const checked = argsCheck(tool?.definition.input_schema ?? {})(args);
  return checked.ok ? undefined : checked.error;
};
const success = (stdout: string, stderr = '', exit_code = 0): ToolResult => ({ ok: true, output: { stdout, stderr, exit_code } });

// ---- calculator ------------------------------------------------------------------------------

describe('calculator', () => {
  const calc = new CalculatorTool();
  const run = (expr: string, precision?: number) =>
    calc.run(precision === undefined ? { expr } : { expr, precision }, ctx());

  it('advertises the NIP-XX example schema', () => {
    expect(CALCULATOR_DEFINITION.name).toBe('calculator');
    expect(CALCULATOR_DEFINITION.input_schema).toEqual({
      type: 'object',
      properties: { expr: { type: 'string' }, precision: { type: 'number' } },
      required: ['expr'],
    });
  });

  it.each([
    ['12 * 7', '84'],
    ['1 + 2 * 3', '7'],
    ['(1 + 2) * 3', '9'],
    ['10 - 4 - 3', '3'],
    ['100 / 10 / 5', '2'],
    ['2 ^ 3 ^ 2', '512'],
    ['(2 ^ 3) ^ 2', '64'],
    ['-2 ^ 2', '-4'],
    ['2 ^ -1', '0.5'],
    ['--3', '3'],
    ['+-+3', '-3'],
    ['-(-(2))', '2'],
    ['2 * -3', '-6'],
    ['7 % 3', '1'],
    ['-7 % 3', '-1'],
    ['1e3 + 1', '1001'],
    ['2.5e-3 * 1000', '2.5'],
    ['1E2', '100'],
    ['.5 + .25', '0.75'],
    ['0.1 + 0.2', '0.3'],
    ['2 * (3 + 4) ^ 2', '98'],
    [' \t1  +\n2 ', '3'],
    ['sqrt(16) + abs(-3)', '7'],
    ['round(2.5)', '3'],
    ['round(-2.5)', '-3'],
    ['round(1.005, 2)', '1.01'],
    ['floor(-1.5)', '-2'],
    ['ceil(1.2)', '2'],
    ['min(3, 1, 2)', '1'],
    ['max(1, 2 + 3, 4)', '5'],
    ['max(-1)', '-1'],
    ['log(1000)', '3'],
    ['log(8, 2)', '3'],
    ['ln(e)', '1'],
    ['sin(pi / 2)', '1'],
    ['cos(0)', '1'],
    ['tan(pi / 4)', '1'],
    ['PI * 2', '6.28318530717959'],
    ['Sqrt(9)', '3'],
    ['-0', '0'],
  ])('%s = %s', async (expr, expected) => {
    expect(await run(expr)).toEqual(success(expected));
  });

  it.each([
    ['10 / 3', 2, '3.33'],
    ['2 / 3', 0, '1'],
    ['1', 3, '1.000'],
    ['-0.001', 2, '0.00'],
    ['pi', 5, '3.14159'],
  ])('%s with precision %d = %s', async (expr, precision, expected) => {
    expect(await run(expr, precision)).toEqual(success(expected));
  });

  it.each([
    ['1 + )', "unexpected ')' at 5"],
    ['(1 + 2', 'unexpected end of expression'],
    ['(1 + 2))', "unexpected ')' at 8"],
    ['()', "unexpected ')' at 2"],
    ['', 'empty expression'],
    ['   ', 'empty expression'],
    ['1 2', "unexpected '2' at 3"],
    ['2pi', "unexpected 'pi' at 2"],
    ['max(1,)', "unexpected ')' at 7"],
    ['1 + 2 // comment', "unexpected '/' at 8"],
    ['1 / 0', 'division by zero'],
    ['1 / (2 - 2)', 'division by zero'],
    ['5 % 0', 'modulo by zero'],
    ['foo(1)', 'unknown function foo at 1'],
    ['x + 1', 'unknown constant x at 1'],
    ['sqrt', "expected '(' after sqrt at 5"],
    ['sqrt(1, 2)', 'sqrt expects 1 argument, got 2 at 1'],
    ['min()', 'min expects at least 1 argument, got 0 at 1'],
    ['round(1, 2, 3)', 'round expects 1 or 2 arguments, got 3 at 1'],
    ['round(1.5, 0.5)', 'round digits must be an integer from 0 to 20'],
    ['sqrt(-4)', 'sqrt of a negative number'],
    ['ln(0)', 'ln of a non-positive number'],
    ['log(-1)', 'log of a non-positive number'],
    ['log(8, 1)', 'invalid logarithm base'],
    ['10 ^ 400', 'numeric overflow'],
    ['(-8) ^ (1 / 3)', 'result is not a number'],
    ['1e999', "number out of range '1e999' at 1"],
    ['1e', "invalid number '1e' at 1"],
    ['2 * 1ex', "invalid number '1ex' at 5"],
    ['1 + $', "unexpected character '$' at 5"],
    // Nothing reaches JavaScript: no property lookups, no statements, no strings.
    ['1;process', "unexpected character ';' at 2"],
    ['constructor', 'unknown constant constructor at 1'],
    ['this', 'unknown constant this at 1'],
    ['__proto__', 'unknown constant __proto__ at 1'],
    ['toString()', 'unknown function toString at 1'],
    ['hasOwnProperty(1)', 'unknown function hasOwnProperty at 1'],
    ['constructor.constructor("return process")()', "unexpected character '.' at 12"],
    ['alert`1`', "unexpected character '`' at 6"],
    ['globalThis', 'unknown constant globalThis at 1'],
  ])('%j fails: %s', async (expr, error) => {
    expect(await run(expr)).toEqual(failure(error));
  });

  it('limits length and nesting', async () => {
    expect(await run(`${'1+'.repeat(499)}1`)).toEqual(success('500')); // 999 characters
    expect(await run(`${'1+'.repeat(500)}1`)).toEqual(failure('expression too long (max 1000 characters)'));
    expect(await run(`${'('.repeat(63)}1${')'.repeat(63)}`)).toEqual(success('1'));
    expect(await run(`${'('.repeat(64)}1${')'.repeat(64)}`)).toEqual(failure('nesting too deep (max 64 levels) at 65'));
    expect(await run(`${'-'.repeat(63)}1`)).toEqual(success('-1'));
    expect(await run(`${'-'.repeat(64)}1`)).toEqual(failure('nesting too deep (max 64 levels) at 65'));
    expect(await run(`${'2^'.repeat(80)}1`)).toEqual(failure('nesting too deep (max 64 levels) at 129'));
  });

  it('checks its arguments (the schema through the registry, the precision range itself)', async () => {
    const registry = await buildToolRunner({ tools: ['calculator'] });
    const call = (args: unknown) => registry.run('calculator', args, never());
    expect(await call({})).toEqual(failure('invalid arguments: missing required property "expr"'));
    expect(await call({ expr: 5 })).toEqual(failure('invalid arguments: "expr" must be a string'));
    expect(await call('1+1')).toEqual(failure('invalid arguments: expected an object'));
    expect(await call(null)).toEqual(failure('invalid arguments: expected an object'));
    expect(await call({ expr: '1', precision: 'two' })).toEqual(failure('invalid arguments: "precision" must be a number'));
    expect(await run('1', 2.5)).toEqual(failure('precision must be an integer from 0 to 20'));
    expect(await run('1', 21)).toEqual(failure('precision must be an integer from 0 to 20'));
    expect(await run('1', -1)).toEqual(failure('precision must be an integer from 0 to 20'));
  });

  it('exposes the evaluator as a value-returning function', () => {
    expect(calculate('2^10')).toEqual({ ok: true, value: 1024 });
    expect(calculate('2^')).toEqual({ ok: false, error: 'unexpected end of expression' });
  });
});

// ---- argument checks -------------------------------------------------------------------------

describe('argument checks', () => {
  const schema = {
    type: 'object',
    properties: {
      unit: { type: 'string', enum: ['c', 'f'] },
      count: { type: 'integer' },
      tags: { type: 'array', items: { type: 'string' } },
      where: {
        type: 'object',
        properties: { lat: { type: 'number' } },
        required: ['lat'],
        additionalProperties: false,
      },
      maybe: { type: ['string', 'null'] },
      flag: { type: 'boolean' },
    },
    required: ['unit'],
  };

  it.each([
    [{ unit: 'c' }, undefined],
    [{ unit: 'k' }, '"unit" must be one of "c", "f"'],
    [{ unit: 'c', count: 1.5 }, '"count" must be an integer'],
    [{ unit: 'c', tags: ['a', 2] }, '"tags[1]" must be a string'],
    [{ unit: 'c', where: {} }, 'missing required property "where.lat"'],
    [{ unit: 'c', where: { lat: 1, lon: 2 } }, 'unknown property "where.lon"'],
    [{ unit: 'c', maybe: null }, undefined],
    [{ unit: 'c', maybe: 3 }, '"maybe" must be a string or null'],
    [{ unit: 'c', flag: 'yes' }, '"flag" must be a boolean'],
    [{ unit: 'c', extra: 'allowed without additionalProperties: false' }, undefined],
    [{ unit: 'c', code: 'ab' }, '"code": string is too long (2 > 1)'],
    [{ unit: 'c', site: 'not a url' }, undefined],
    [[1], 'expected an object'],
  ])('%j → %s', (value, problem) => {
    const checked = argsCheck({ ...schema, properties: { ...schema.properties, code: { type: 'string', maxLength: 1 }, site: { type: 'string', format: 'uri' } } })(value);
    expect(checked.ok ? undefined : checked.error).toBe(problem === undefined ? undefined : `invalid arguments: ${problem}`);
    if (checked.ok) expect(checked.value).toBe(value);
  });

  it('always wants an object as arguments', () => {
    expect(argsCheck({ type: 'array' })([])).toEqual({ ok: false, error: 'invalid arguments: expected an object' });
    expect(argsCheck({})({})).toEqual({ ok: true, value: {} });
  });

  it('refuses a call whose schema cannot be applied, as a value', () => {
    expect(argsCheck({ type: 'object', properties: { s: { $ref: '#/$defs/missing' } } })({ s: 'x' })).toEqual({
      ok: false,
      error: `invalid arguments: the tool's input schema cannot be applied: Unresolved $ref "#/$defs/missing".  Absolute URI "https://github.com/cfworker#/$defs/missing".`,
    });
    const cycle = argsCheck({ $ref: '#' })({});
    expect(cycle.ok || cycle.error).toMatch(/^invalid arguments: the tool's input schema cannot be applied: /);
  });

  it('runs no regular expression of a schema (a server could stall the agent with one)', () => {
    const check = argsCheck({
      type: 'object',
      properties: {
        pattern: { type: 'string', pattern: '^(a+)+$' },
        site: { type: 'string', format: 'url' },
        tagged: { type: 'object', patternProperties: { '^x-': { type: 'number' } }, additionalProperties: false },
      },
      dependentRequired: { pattern: ['tagged'] },
    });
    expect(check({ pattern: `${'a'.repeat(40)}!`, site: 'no', tagged: { 'x-1': 'one', other: true } }).ok).toBe(true);
    // A property named like the keywords is still checked.
    expect(check({ pattern: 1, tagged: {} })).toEqual({ ok: false, error: 'invalid arguments: "pattern" must be a string' });
    expect(check({ pattern: 'a' })).toEqual({ ok: false, error: 'invalid arguments: instance has "pattern" but does not have "tagged"' });
  });
});

// ---- host policy -----------------------------------------------------------------------------

describe('host policy', () => {
  it.each([
    ['127.0.0.1', 0x7f000001],
    ['2130706433', 0x7f000001],
    ['0x7f000001', 0x7f000001],
    ['0x7f.1', 0x7f000001],
    ['0177.0.0.1', 0x7f000001],
    ['017700000001', 0x7f000001],
    ['127.1', 0x7f000001],
    ['127.0.1', 0x7f000001],
    ['10.0.0.1.', 0x0a000001],
    ['0x', 0],
    ['256.0.0.1', undefined],
    ['1.2.3.4.5', undefined],
    ['08.0.0.1', undefined],
    ['4294967296', undefined],
    ['example.com', undefined],
  ])('parseIPv4(%s) = %s', (host, value) => {
    expect(parseIPv4(host)).toBe(value);
  });

  it('parses IPv6 literals', () => {
    expect(parseIPv6('[::1]')).toEqual([0, 0, 0, 0, 0, 0, 0, 1]);
    expect(parseIPv6('::ffff:127.0.0.1')).toEqual([0, 0, 0, 0, 0, 0xffff, 0x7f00, 1]);
    expect(parseIPv6('2001:db8::8:800:200c:417a')).toEqual([0x2001, 0xdb8, 0, 0, 8, 0x800, 0x200c, 0x417a]);
    expect(parseIPv6('1:2:3:4:5:6:7:8')).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(parseIPv6('1::2::3')).toBeUndefined();
    expect(parseIPv6('1:2:3:4:5:6:7:8:9')).toBeUndefined();
    expect(parseIPv6('::12345')).toBeUndefined();
    expect(parseIPv6('fe80::1%eth0')).toBeUndefined();
  });

  it.each([
    // raw hosts, as they might arrive without URL normalisation
    ['2130706433', '127.0.0.1 is a loopback address'],
    ['0x7f.1', '127.0.0.1 is a loopback address'],
    ['0177.0.0.1', '127.0.0.1 is a loopback address'],
    ['::ffff:127.0.0.1', '[::ffff:127.0.0.1] is an IPv4-mapped form of 127.0.0.1, a loopback address'],
    ['[::1]', '[::1] is a loopback address'],
    ['::', '[::] is an unspecified address'],
    ['::127.0.0.1', '[::127.0.0.1] is a reserved address'],
    ['1.2.3.4.5', '1.2.3.4.5 is not a valid IPv4 address'],
    ['0x7g.1', '0x7g.1 is not a valid IPv4 address'],
    ['[1::2::3]', '[1::2::3] is not a valid address'],
    ['Metadata.Google.Internal', 'Metadata.Google.Internal is a local name'],
    ['router.home.arpa', 'router.home.arpa is a local name'],
    ['8.8.8.8', undefined],
    ['2606:4700:4700::1111', undefined],
    ['example.com', undefined],
    ['example.com.', undefined],
  ])('classifyHost(%s) = %s', (host, verdict) => {
    expect(classifyHost(host)).toBe(verdict);
  });

  it('matches allowlist patterns', () => {
    const { patterns, invalid } = parseAllowlist([
      'Example.COM',
      '*.example.org',
      'bücher.example',
      '127.0.0.1',
      'http://x.com',
      'x.com:8080',
      '*.*.y.com',
      '*.10.0.0.1',
      '',
    ]);
    expect(patterns.map((p) => p.pattern)).toEqual(['example.com', '*.example.org', 'xn--bcher-kva.example', '127.0.0.1']);
    expect(invalid).toEqual(['http://x.com', 'x.com:8080', '*.*.y.com', '*.10.0.0.1', '']);
    expect(hostAllowed('example.com', patterns)).toBe(true);
    expect(hostAllowed('www.example.com', patterns)).toBe(false);
    expect(hostAllowed('a.example.org', patterns)).toBe(true);
    expect(hostAllowed('a.b.example.org', patterns)).toBe(true);
    expect(hostAllowed('example.org', patterns)).toBe(false);
    expect(hostAllowed('badexample.org', patterns)).toBe(false);
    expect(hostAllowed('example.org.evil.net', patterns)).toBe(false);
    expect(hostAllowed(new URL('http://bücher.example/').hostname, patterns)).toBe(true);
  });
});

// ---- web_fetch -------------------------------------------------------------------------------

describe('web_fetch', () => {
  const local = new WebFetchTool({ allowlist: ['127.0.0.1'], policy: DEVELOPMENT });
  const get = (path: string, extra: Record<string, unknown> = {}, tool: Tool = local) =>
    tool.run({ url: `${FIXTURE}${path}`, ...extra }, ctx());

  it('returns text, JSON and XML bodies', async () => {
    expect(await get('/text')).toEqual(success('hello from the fixture', 'HTTP 200'));
    expect(await get('/json')).toEqual(success('{"ok":true,"n":42}', 'HTTP 200'));
    expect(await get('/xml')).toEqual(success('<rss version="2.0"/>', 'HTTP 200'));
    expect(await get('/latin1')).toEqual(success('café', 'HTTP 200'));
    expect(await get('/no-content')).toEqual(success('', 'HTTP 204'));
  });

  it('sends its user agent', async () => {
    const result = await get('/echo-headers');
    expect(result.ok && (JSON.parse(result.output.stdout) as Record<string, string>)['user-agent']).toBe('edgestr-web-fetch/1.0');
  });

  it('sets exit_code 1 for HTTP errors', async () => {
    expect(await get('/status?code=404')).toEqual(success('status 404', 'HTTP 404', 1));
    expect(await get('/status?code=500')).toEqual(success('status 500', 'HTTP 500', 1));
    expect(await get('/status?code=399')).toEqual(success('status 399', 'HTTP 399', 0));
  });

  it('refuses non-text content types', async () => {
    expect(await get('/image')).toEqual(failure('unsupported content type: image/png'));
    expect(await get('/no-type')).toEqual(failure('unsupported content type: (none)'));
  });

  it('truncates at max_bytes', async () => {
    const pattern = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/'.repeat(1024);
    expect(await get('/big?n=100000', { max_bytes: 1000 })).toEqual(
      success(pattern.slice(0, 1000), 'HTTP 200\ntruncated at 1000 bytes'),
    );
    expect(await get('/big?n=1000', { max_bytes: 1000 })).toEqual(success(pattern.slice(0, 1000), 'HTTP 200'));
    // A cut two-byte character is dropped, not turned into U+FFFD.
    expect(await get('/utf8', { max_bytes: 3 })).toEqual(success('é', 'HTTP 200\ntruncated at 3 bytes'));
  });

  it('caps max_bytes at the configured limit (default 256 KiB)', async () => {
    const small = new WebFetchTool({ allowlist: ['127.0.0.1'], policy: DEVELOPMENT, maxBytes: 4096 });
    const capped = await get('/big?n=10000', { max_bytes: 1_000_000 }, small);
    expect(capped.ok && capped.output.stdout.length).toBe(4096);
    expect(capped.ok && capped.output.stderr).toBe('HTTP 200\ntruncated at 4096 bytes');
    const byDefault = await get('/big?n=300000');
    expect(byDefault.ok && byDefault.output.stdout.length).toBe(262_144);
    expect(byDefault.ok && byDefault.output.stderr).toBe('HTTP 200\ntruncated at 262144 bytes');
  });

  it('follows redirects, at most 5', async () => {
    expect(await get('/chain/3')).toEqual(success('hello from the fixture', `HTTP 200 from ${FIXTURE}/text`));
    expect(await get('/chain/5')).toEqual(success('hello from the fixture', `HTTP 200 from ${FIXTURE}/text`));
    expect(await get('/chain/6')).toEqual(failure('too many redirects (max 5)'));
    expect(await get('/redirect?status=307&to=/json')).toEqual(success('{"ok":true,"n":42}', `HTTP 200 from ${FIXTURE}/json`));
  });

  it('checks every redirect hop', async () => {
    const to = (target: string) => `/redirect?to=${encodeURIComponent(target)}`;
    expect(await get(to('http://evil.example/'))).toEqual(failure('redirect refused: evil.example is not in the allowlist'));
    expect(await get(to(`http://localhost:${FIXTURE_PORT}/text`))).toEqual(
      failure('redirect refused: localhost is not in the allowlist'),
    );
    expect(await get(to(`ftp://127.0.0.1:${FIXTURE_PORT}/`))).toEqual(
      failure('redirect refused: only http and https URLs are allowed'),
    );
    expect(await get(to(`http://u:p@127.0.0.1:${FIXTURE_PORT}/text`))).toEqual(
      failure('redirect refused: URLs with credentials are not allowed'),
    );
    expect(await get(to('http://[::1]:1/'))).toEqual(failure('redirect refused: [::1] is not in the allowlist'));
  });

  it('times out (headers or body) and honours the caller signal', async () => {
    const quick = new WebFetchTool({ allowlist: ['127.0.0.1'], policy: DEVELOPMENT, timeoutMs: 300 });
    let started = Date.now();
    expect(await get('/slow-headers?ms=3000', {}, quick)).toEqual(failure('timed out after 300 ms'));
    expect(Date.now() - started).toBeLessThan(2000);
    started = Date.now();
    expect(await get('/slow-body?ms=3000', {}, quick)).toEqual(failure('timed out after 300 ms'));
    expect(Date.now() - started).toBeLessThan(2000);

    const caller = new AbortController();
    setTimeout(() => caller.abort(), 100);
    started = Date.now();
    expect(await local.run({ url: `${FIXTURE}/slow-headers?ms=3000` }, { signal: caller.signal })).toEqual(failure('aborted'));
    expect(Date.now() - started).toBeLessThan(2000);
    expect(await local.run({ url: `${FIXTURE}/text` }, { signal: AbortSignal.abort() })).toEqual(failure('aborted'));
  });

  it('is disabled by an empty allowlist', async () => {
    const off = new WebFetchTool({ allowlist: [], policy: DEVELOPMENT });
    expect(off.definition.description).toContain('Disabled: no hosts are allowed.');
    expect(await get('/text', {}, off)).toEqual(failure('web_fetch is disabled: no allowed hosts are configured'));
  });

  it('refuses hosts outside the allowlist', async () => {
    expect(await local.run({ url: `http://127.0.0.2:${FIXTURE_PORT}/text` }, ctx())).toEqual(
      failure('refused: 127.0.0.2 is not in the allowlist'),
    );
    const pub = new WebFetchTool({ allowlist: ['*.example.com', 'example.net'] });
    expect(pub.definition.description).toContain('Allowed hosts: *.example.com, example.net.');
    for (const [url, error] of [
      ['https://example.org/', 'refused: example.org is not in the allowlist'],
      ['https://example.com/', 'refused: example.com is not in the allowlist'],
      ['https://www.example.net/', 'refused: www.example.net is not in the allowlist'],
      ['https://8.8.8.8/', 'refused: 8.8.8.8 is not in the allowlist'],
      ['https://172.32.0.1/', 'refused: 172.32.0.1 is not in the allowlist'],
      ['https://100.128.0.1/', 'refused: 100.128.0.1 is not in the allowlist'],
      ['https://[2606:4700::1111]/', 'refused: [2606:4700::1111] is not in the allowlist'],
      ['http://www.example.com/', 'refused: plain http:// is allowed only in development or for hosts in EDGESTR_OUTBOUND_ALLOW; use https://'],
    ] as const) {
      expect(await pub.run({ url }, ctx()), url).toEqual(failure(error));
    }
  });

  it('checks its arguments and URL', async () => {
    const registry = await buildToolRunner({ tools: ['web_fetch'], web_fetch_hosts: ['127.0.0.1'] }, { webFetch: { policy: DEVELOPMENT } });
    expect(await registry.run('web_fetch', { url: 1 }, never())).toEqual(failure('invalid arguments: "url" must be a string'));
    expect(await registry.run('web_fetch', {}, never())).toEqual(failure('invalid arguments: missing required property "url"'));
    expect(await get('/text', { max_bytes: 0 })).toEqual(failure('max_bytes must be a positive integer'));
    expect(await get('/text', { max_bytes: 1.5 })).toEqual(failure('max_bytes must be a positive integer'));
    expect(await local.run({ url: 'not a url' }, ctx())).toEqual(failure('invalid URL'));
    expect(await local.run({ url: `http://127.0.0.1/${'a'.repeat(2048)}` }, ctx())).toEqual(
      failure('url too long (max 2048 characters)'),
    );
    for (const url of ['file:///etc/passwd', 'javascript:alert(1)', 'ftp://127.0.0.1/', 'data:text/plain,hi']) {
      expect(await local.run({ url }, ctx()), url).toEqual(failure('refused: only http and https URLs are allowed'));
    }
    expect(await local.run({ url: `http://user:pw@127.0.0.1:${FIXTURE_PORT}/text` }, ctx())).toEqual(
      failure('refused: URLs with credentials are not allowed'),
    );
  });

  describe('under the production outbound policy (the default)', () => {
    // Every host is on the tool's allowlist, so only the outbound policy can refuse (https, so that
    // the plain-http rule does not come first).
    const REFUSED: Array<[string, string]> = [
      ['https://127.0.0.1/', '127.0.0.1 is a loopback address'],
      [`https://127.0.0.1:${FIXTURE_PORT}/text`, '127.0.0.1 is a loopback address'],
      ['https://2130706433/', '127.0.0.1 is a loopback address'],
      ['https://0x7f.1/', '127.0.0.1 is a loopback address'],
      ['https://0177.0.0.1/', '127.0.0.1 is a loopback address'],
      ['https://017700000001/', '127.0.0.1 is a loopback address'],
      ['https://127.1/', '127.0.0.1 is a loopback address'],
      ['https://127.255.255.254/', '127.255.255.254 is a loopback address'],
      ['https://10.1.2.3/', '10.1.2.3 is a private address'],
      ['https://172.16.5.4/', '172.16.5.4 is a private address'],
      ['https://172.31.255.255/', '172.31.255.255 is a private address'],
      ['https://192.168.1.1/', '192.168.1.1 is a private address'],
      ['https://169.254.169.254/latest/meta-data/', '169.254.169.254 is a link-local address'],
      ['https://100.64.0.1/', '100.64.0.1 is a carrier-grade NAT address'],
      ['https://100.127.255.255/', '100.127.255.255 is a carrier-grade NAT address'],
      ['https://0.0.0.0/', '0.0.0.0 is an unspecified address'],
      ['https://0/', '0.0.0.0 is an unspecified address'],
      ['https://224.0.0.1/', '224.0.0.1 is a multicast address'],
      ['https://239.255.255.250/', '239.255.255.250 is a multicast address'],
      ['https://255.255.255.255/', '255.255.255.255 is a reserved address'],
      ['https://192.0.2.1/', '192.0.2.1 is a reserved address'],
      ['https://198.18.0.1/', '198.18.0.1 is a reserved address'],
      ['https://[::1]/', '[::1] is a loopback address'],
      ['https://[::]/', '[::] is an unspecified address'],
      ['https://[::ffff:127.0.0.1]/', '[::ffff:7f00:1] is an IPv4-mapped form of 127.0.0.1, a loopback address'],
      ['https://[::ffff:10.0.0.1]/', '[::ffff:a00:1] is an IPv4-mapped form of 10.0.0.1, a private address'],
      ['https://[::ffff:169.254.169.254]/', '[::ffff:a9fe:a9fe] is an IPv4-mapped form of 169.254.169.254, a link-local address'],
      ['https://[64:ff9b::a9fe:a9fe]/', '[64:ff9b::a9fe:a9fe] is a NAT64 form of 169.254.169.254, a link-local address'],
      ['https://[2002:7f00:1::]/', '[2002:7f00:1::] is a 6to4 form of 127.0.0.1, a loopback address'],
      ['https://[fc00::1]/', '[fc00::1] is a private address'],
      ['https://[fd12:3456::1]/', '[fd12:3456::1] is a private address'],
      ['https://[fe80::1]/', '[fe80::1] is a link-local address'],
      ['https://[febf::1]/', '[febf::1] is a link-local address'],
      ['https://[ff02::1]/', '[ff02::1] is a multicast address'],
      ['https://[2001:db8::1]/', '[2001:db8::1] is a reserved address'],
      ['https://localhost/', 'localhost is a local name'],
      [`https://LOCALHOST.:${FIXTURE_PORT}/`, 'localhost. is a local name'],
      ['https://api.localhost/', 'api.localhost is a local name'],
      ['https://printer.local/', 'printer.local is a local name'],
      ['https://metadata.google.internal/', 'metadata.google.internal is a local name'],
      ['https://intranet/', 'intranet is a single-label (local) name'],
    ];
    const strict = new WebFetchTool({ allowlist: REFUSED.map(([url]) => new URL(url).hostname) });
    it.each(REFUSED)('%s is refused: %s', async (url, reason) => {
      expect(await strict.run({ url }, ctx())).toEqual(failure(`refused: ${reason}`));
    });

    it('asks its owner\'s allowlist before the outbound policy: a prompt cannot probe which hosts EDGESTR_OUTBOUND_ALLOW lists', async () => {
      const ALLOW = { EDGESTR_OUTBOUND_ALLOW: '10.0.0.5:8080, mcp.internal.example' };
      for (const vetted of [true, false]) {
        const tool = new WebFetchTool({ allowlist: ['example.org'], policy: outboundPolicy(ALLOW, { vetted }) });
        for (const url of ['http://10.0.0.5:8080/', 'http://10.0.0.5:9/', 'http://mcp.internal.example/', 'http://10.0.0.7:8080/']) {
          expect(await tool.run({ url }, ctx())).toEqual(failure(`refused: ${new URL(url).hostname} is not in the allowlist`));
        }
      }
    });

    it("tells the generic text for every refusal of the policy when the operators' list applies (a vetted owner's agent), the reason logged and the owner's detail; else the rules' own reasons", async () => {
      const ALLOW = { EDGESTR_OUTBOUND_ALLOW: '10.0.0.5' };
      const generic = (at: string, reason: string) => ({
        ...failure(`refused: ${at} may not be fetched (the deployment's outbound policy; the agent's owner can see why)`),
        detail: `the deployment's outbound policy refuses ${at}: ${reason}`,
      });
      const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
      try {
        const vetted = new WebFetchTool({ allowlist: ['10.0.0.5', '10.0.0.6'], policy: outboundPolicy(ALLOW, { vetted: true }) });
        expect(await vetted.run({ url: 'http://10.0.0.5:9200/_cat/indices' }, ctx())).toEqual(generic('10.0.0.5:9200', 'EDGESTR_OUTBOUND_ALLOW lists 10.0.0.5 on its default port only, not 9200'));
        expect(await vetted.run({ url: 'https://10.0.0.6/' }, ctx())).toEqual(generic('10.0.0.6:443', '10.0.0.6 is a private address'));
        expect(warn.mock.calls.map((args) => args.join(' '))).toEqual([
          "agent: web_fetch refused 10.0.0.5:9200 (the deployment's outbound policy): EDGESTR_OUTBOUND_ALLOW lists 10.0.0.5 on its default port only, not 9200",
          "agent: web_fetch refused 10.0.0.6:443 (the deployment's outbound policy): 10.0.0.6 is a private address",
        ]);
        warn.mockClear();
        const selfSignedUp = new WebFetchTool({ allowlist: ['10.0.0.5', '10.0.0.6'], policy: outboundPolicy(ALLOW, { vetted: false }) });
        expect(await selfSignedUp.run({ url: 'http://10.0.0.5:9200/' }, ctx())).toEqual(failure('refused: plain http:// is allowed only in development or for hosts in EDGESTR_OUTBOUND_ALLOW; use https://'));
        expect(await selfSignedUp.run({ url: 'https://10.0.0.6/' }, ctx())).toEqual(failure('refused: 10.0.0.6 is a private address'));
        expect(warn).not.toHaveBeenCalled();
      } finally {
        warn.mockRestore();
      }
    });

    it('treats malformed numeric hosts as invalid URLs', async () => {
      expect(await strict.run({ url: 'http://1.2.3.4.5/' }, ctx())).toEqual(failure('invalid URL'));
      expect(await strict.run({ url: 'http://256.0.0.1/' }, ctx())).toEqual(failure('invalid URL'));
    });
  });
});

// ---- MCP -------------------------------------------------------------------------------------

const NAME_RULE = /^[a-zA-Z0-9_-]{1,64}$/;

describe('MCP tools', () => {
  // Production workerd forbids code generation; the vitest workers pool allows `new Function`.
  // Forbid it here so that a client that compiles schemas (the SDK's default Ajv) fails the tests.
  const OriginalFunction = globalThis.Function;
  beforeAll(() => {
    const forbid = (): never => {
      throw new EvalError('Code generation from strings disallowed for this context');
    };
    globalThis.Function = new Proxy(OriginalFunction, { construct: forbid, apply: forbid });
  });
  afterAll(() => {
    globalThis.Function = OriginalFunction;
  });

  it('runs with code generation forbidden', () => {
    expect(() => new Function('return 1')).toThrow('Code generation from strings disallowed for this context');
  });

  it('names tools <serverId>__<toolName> within [a-zA-Z0-9_-]{1,64}', () => {
    expect(mcpToolName('everything', 'get-sum')).toBe('everything__get-sum');
    expect(mcpToolName('paged', 'search.web')).toBe('paged__search_web_d62a5352');
    expect(mcpToolName('paged', 'search_web')).toBe('paged__search_web');
    const long = mcpToolName('paged', 'an_extremely_long_tool_name_that_goes_on_and_on_past_the_sixty_four_character_limit');
    expect(long).toBe('paged__an_extremely_long_tool_name_that_goes_on_and_on__019f5066');
    expect(long).toMatch(NAME_RULE);
    expect(mcpToolName('s', 'ünïcode tool')).toMatch(NAME_RULE);
    // A DVMCP server id may hold '.': it is written '_' in the names.
    expect(mcpToolName('weather.v2', 'forecast')).toBe('weather_v2__forecast');
    expect(mcpToolName('weather.v2', 'get.forecast')).toMatch(NAME_RULE);
    expect(mcpToolName(`${'d'.repeat(60)}.x`, 'lookup')).toMatch(NAME_RULE);
  });

  describe('server-everything', () => {
    let conn: McpConnection;
    const tool = (name: string): Tool => {
      const t = conn.tools.find((x) => x.definition.name === name);
      if (!t) throw new Error(`no tool ${name}`);
      return t;
    };

    beforeAll(async () => {
      const connected = await connectMcpServer({ id: 'everything', url: EVERYTHING }, { policy: LOCAL_SERVERS });
      if (!connected.ok) throw new Error(connected.error);
      conn = connected.value;
    });
    afterAll(async () => {
      await conn.close();
    });

    it('lists the tools', () => {
      const names = conn.tools.map((t) => t.definition.name);
      expect(names).toEqual(
        expect.arrayContaining(['everything__echo', 'everything__get-sum', 'everything__get-structured-content']),
      );
      for (const n of names) expect(n).toMatch(NAME_RULE);
      expect(conn.skipped).toEqual([]);
      const echo = tool('everything__echo').definition;
      expect(echo.description).toBe('Echoes back the input string');
      expect(echo.schema_version).toBe(1);
      expect(echo.requires_approval).toBe(false);
      expect(echo.input_schema).toMatchObject({
        type: 'object',
        properties: { message: { type: 'string' } },
        required: ['message'],
      });
    });

    it('calls echo and get-sum', async () => {
      expect(await tool('everything__echo').run({ message: 'hello' }, ctx())).toEqual(success('Echo: hello'));
      expect(await tool('everything__get-sum').run({ a: 2, b: 3.5 }, ctx())).toEqual(success('The sum of 2 and 3.5 is 5.5.'));
    });

    it('renders structured output without generating code', async () => {
      const result = await tool('everything__get-structured-content').run({ location: 'Chicago' }, ctx());
      expect(result.ok && JSON.parse(result.output.stdout)).toEqual({
        temperature: 36,
        conditions: 'Light rain / drizzle',
        humidity: 82,
      });
    });

    it('rejects bad arguments before calling, and reports the server’s own validation errors', async () => {
      // The server's schemas as the registry applies them (registry.run calls only with checked arguments).
      expect(argsError(tool('everything__echo'), { message: 5 })).toBe('invalid arguments: "message" must be a string');
      expect(argsError(tool('everything__get-sum'), { a: 1 })).toBe('invalid arguments: missing required property "b"');
      expect(argsError(tool('everything__get-structured-content'), { location: 'Paris' })).toBe(
        'invalid arguments: "location" must be one of "New York", "Chicago", "Los Angeles"',
      );
      // `format: uri` is not checked here (args.ts: no regular expressions); the server refuses it
      // as a tool error (isError).
      expect(argsError(tool('everything__gzip-file-as-resource'), { data: 'not a url' })).toBeUndefined();
      const server = await tool('everything__gzip-file-as-resource').run({ data: 'not a url' }, ctx());
      expect(server.ok).toBe(true);
      expect(server.ok && server.output.exit_code).toBe(1);
      expect(server.ok && server.output.stdout).toContain(
        'Input validation error: Invalid arguments for tool gzip-file-as-resource',
      );
    });

    it('times out a long call', async () => {
      const quick = await connectMcpServer({ id: 'quick', url: EVERYTHING }, { policy: LOCAL_SERVERS, callTimeoutMs: 300 });
      if (!quick.ok) throw new Error(quick.error);
      try {
        const op = quick.value.tools.find((t) => t.definition.name === 'quick__trigger-long-running-operation');
        const started = Date.now();
        expect(await op?.run({ duration: 5, steps: 5 }, ctx())).toEqual(
          failure('MCP quick__trigger-long-running-operation: timed out after 300 ms'),
        );
        expect(Date.now() - started).toBeLessThan(2000);
        // The session still works after an abandoned call.
        const echo = quick.value.tools.find((t) => t.definition.name === 'quick__echo');
        expect(await echo?.run({ message: 'still here' }, ctx())).toEqual(success('Echo: still here'));
      } finally {
        await quick.value.close();
      }
    });
  });

  describe('hand-written endpoints', () => {
    it('follows tools/list pages, applies the naming rule, renders content', async () => {
      const connected = await connectMcpServer({
        id: 'paged',
        url: `${FIXTURE}/mcp-paged`,
        headers: { authorization: 'Bearer s3cret' },
      }, { policy: LOCAL_SERVERS });
      if (!connected.ok) throw new Error(connected.error);
      const conn = connected.value;
      try {
        expect(conn.tools.map((t) => t.definition.name)).toEqual([
          'paged__lookup',
          'paged__search_web_d62a5352',
          'paged__whoami',
          'paged__an_extremely_long_tool_name_that_goes_on_and_on__019f5066',
          'paged__fails',
          'paged__mixed',
          'paged__slow',
        ]);
        const [lookup, searchWeb, whoami, long, fails, mixed] = conn.tools;
        expect(whoami?.definition.description).toBe('Who am I');
        expect(long?.definition.input_schema).toEqual({ type: 'object' });
        expect(await lookup?.run({ word: 'cat' }, ctx())).toEqual(success('definition of cat'));
        expect(argsError(lookup, {})).toBe('invalid arguments: missing required property "word"');
        expect(await searchWeb?.run({}, ctx())).toEqual(success('searched'));
        expect(await long?.run({}, ctx())).toEqual(success('long'));
        expect(await whoami?.run({}, ctx())).toEqual(success('authorization: Bearer s3cret'));
        expect(await fails?.run({}, ctx())).toEqual(success('it went wrong', '', 1));
        expect(await mixed?.run({}, ctx())).toEqual(
          success('line one\n[image: image/png]\nembedded text\n[resource link: file:///other.bin]\nline two'),
        );
      } finally {
        await conn.close();
      }
    });

    it('limits the number of tools and the output size', async () => {
      const connected = await connectMcpServer({ id: 'few', url: `${FIXTURE}/mcp-paged` }, { policy: LOCAL_SERVERS, maxTools: 2, maxOutputChars: 4 });
      if (!connected.ok) throw new Error(connected.error);
      expect(connected.value.tools.map((t) => t.definition.name)).toEqual(['few__lookup', 'few__search_web_d62a5352']);
      expect(connected.value.skipped).toEqual([
        'whoami (over the tool limit of 2)',
        'an_extremely_long_tool_name_that_goes_on_and_on_past_the_sixty_four_character_limit (over the tool limit of 2)',
        'fails (over the tool limit of 2)',
        'mixed (over the tool limit of 2)',
        'slow (over the tool limit of 2)',
      ]);
      expect(await connected.value.tools[1]?.run({}, ctx())).toEqual(success('sear', 'truncated at 4 characters'));
      await connected.value.close();
    });

    it("bounds what a server's tool definitions cost on every model call: a description is cut with a note, a huge input schema leaves its tool out (logged)", async () => {
      const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
      try {
        const connected = await connectMcpServer({ id: 'big', url: `${FIXTURE}/mcp-huge?description=1048576&schema=1048576` }, { policy: LOCAL_SERVERS });
        if (!connected.ok) throw new Error(connected.error);
        const conn = connected.value;
        expect(conn.tools.map((t) => t.definition.name)).toEqual(['big__huge', 'big__repeat', 'big__structured', 'big__error']);
        expect(conn.tools[0]?.definition.description).toBe(`${'x'.repeat(MAX_MCP_DESCRIPTION_CHARS)}\n[description cut: the first ${MAX_MCP_DESCRIPTION_CHARS} of 1048576 characters]`);
        const schemaChars = JSON.stringify({ type: 'object', description: 's'.repeat(1_048_576) }).length;
        const leftOut = `small (its input schema is ${schemaChars} characters, at most ${MAX_MCP_INPUT_SCHEMA_CHARS})`;
        expect(conn.skipped).toEqual([leftOut]);
        expect(warn.mock.calls.map((args) => args.join(' '))).toEqual([`agent: MCP server big: tools left out for their size: ${leftOut}`]);
        expect(await conn.tools[1]?.run({ unit: 'a', count: 3 }, ctx())).toEqual(success('aaa'));
        await conn.close();
      } finally {
        warn.mockRestore();
      }
    });

    it('leaves out a tool whose input schema nests deeper than 64 levels (logged, in skipped); 64 levels are taken', async () => {
      const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
      try {
        const deep = await connectMcpServer({ id: 'deep', url: `${FIXTURE}/mcp-huge?deep=70` }, { policy: LOCAL_SERVERS });
        if (!deep.ok) throw new Error(deep.error);
        expect(deep.value.tools.map((t) => t.definition.name)).toEqual(['deep__huge', 'deep__small', 'deep__repeat', 'deep__structured', 'deep__error']);
        expect(deep.value.skipped).toEqual(['deep (its input schema nests deeper than 64 levels)']);
        expect(warn.mock.calls.map((args) => args.join(' '))).toEqual(['agent: MCP server deep: tools left out for their size: deep (its input schema nests deeper than 64 levels)']);
        await deep.value.close();
        const edge = await connectMcpServer({ id: 'edge', url: `${FIXTURE}/mcp-huge?deep=64` }, { policy: LOCAL_SERVERS });
        if (!edge.ok) throw new Error(edge.error);
        expect(edge.value.tools.map((t) => t.definition.name)).toContain('edge__deep');
        expect(edge.value.skipped).toEqual([]);
        await edge.value.close();
      } finally {
        warn.mockRestore();
      }
    });

    it("bounds a server's tool list: the tools past its size limit are left out (logged), the first ones kept", async () => {
      const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
      try {
        const connected = await connectMcpServer({ id: 'many', url: `${FIXTURE}/mcp-huge?description=${MAX_MCP_DESCRIPTION_CHARS}&more=100` }, { policy: LOCAL_SERVERS });
        if (!connected.ok) throw new Error(connected.error);
        const conn = connected.value;
        const names = conn.tools.map((t) => t.definition.name);
        const size = conn.tools.reduce((n, t) => n + JSON.stringify({ name: t.definition.name, description: t.definition.description, input_schema: t.definition.input_schema }).length, 0);
        expect(size).toBeLessThanOrEqual(MAX_MCP_TOOL_LIST_CHARS);
        expect(names.slice(0, 6)).toEqual(['many__huge', 'many__small', 'many__repeat', 'many__structured', 'many__error', 'many__more0']);
        const kept = names.length - 5;
        // 100 descriptions of 16,384 characters: about 31 of them fit in 524,288.
        expect(kept).toBeGreaterThan(25);
        expect(kept).toBeLessThan(32);
        const over = (i: number): string => `more${i} (over the ${MAX_MCP_TOOL_LIST_CHARS} characters of tool definitions one server may have)`;
        expect(conn.skipped).toEqual(Array.from({ length: 100 - kept }, (_, i) => over(kept + i)));
        expect(warn.mock.calls.map((args) => args.join(' '))).toEqual([`agent: MCP server many: tools left out for their size: ${conn.skipped.join('; ')}`]);
        await conn.close();
      } finally {
        warn.mockRestore();
      }
    });

    it('times out and aborts calls as values', async () => {
      const connected = await connectMcpServer({ id: 'paged', url: `${FIXTURE}/mcp-paged` }, { policy: LOCAL_SERVERS, callTimeoutMs: 300 });
      if (!connected.ok) throw new Error(connected.error);
      const slow = connected.value.tools.find((t) => t.definition.name === 'paged__slow');
      expect(await slow?.run({ ms: 3000 }, ctx())).toEqual(failure('MCP paged__slow: timed out after 300 ms'));
      const caller = new AbortController();
      setTimeout(() => caller.abort(), 100);
      expect(await slow?.run({ ms: 3000 }, { signal: caller.signal })).toEqual(failure('MCP paged__slow: aborted'));
      expect(await slow?.run({ ms: 10 }, ctx())).toEqual(success('finally'));
      await connected.value.close();
      expect(await slow?.run({ ms: 10 }, ctx())).toEqual(failure('MCP paged__slow: connection is closed'));
    });

    it('opens a new session when the server answers 404 for the old one, without a GET stream', async () => {
      const stats = async (): Promise<ExpireStats> => (await (await fetch(`${FIXTURE}/mcp-expire/stats?bucket=tools-expire`)).json()) as ExpireStats;
      const connected = await connectMcpServer({ id: 'exp', url: `${FIXTURE}/mcp-expire?bucket=tools-expire` }, { policy: LOCAL_SERVERS });
      if (!connected.ok) throw new Error(connected.error);
      const ping = connected.value.tools[0];
      const before = await stats();
      const first = await ping?.run({}, ctx());
      const second = await ping?.run({}, ctx());
      expect(first?.ok && first.output.stdout).toMatch(/^pong from session-\d+$/);
      expect(second?.ok && second.output.stdout).toMatch(/^pong from session-\d+$/);
      expect(second?.ok && second.output.stdout).not.toBe(first?.ok && first.output.stdout);
      // One new initialize, and never a GET: no standalone SSE stream is opened.
      expect(await stats()).toEqual({ initializes: before.initializes + 1, gets: 0, calls: before.calls + 2 });
      await connected.value.close();
    });

    it('keeps sessions and tool lists across connections with a shared cache', async () => {
      const stats = async (): Promise<ExpireStats> => (await (await fetch(`${FIXTURE}/mcp-expire/stats?bucket=tools-cache`)).json()) as ExpireStats;
      const sessions = new McpSessionCache();
      try {
        const before = await stats();
        const first = await connectMcpServer({ id: 'kept', url: `${FIXTURE}/mcp-paged` }, { policy: LOCAL_SERVERS, sessions });
        if (!first.ok) throw new Error(first.error);
        await first.value.close(); // the run ends: the cached session stays open
        const expiring = await connectMcpServer({ id: 'exp', url: `${FIXTURE}/mcp-expire?bucket=tools-cache` }, { policy: LOCAL_SERVERS, sessions });
        if (!expiring.ok) throw new Error(expiring.error);
        await expiring.value.close();
        const again = await connectMcpServer({ id: 'exp', url: `${FIXTURE}/mcp-expire?bucket=tools-cache` }, { policy: LOCAL_SERVERS, sessions });
        if (!again.ok) throw new Error(again.error);
        // One initialize for both connections: the second reused the session and the tool list.
        expect(await stats()).toEqual({ initializes: before.initializes + 1, gets: 0, calls: before.calls });
        expect(again.value.tools.map((t) => t.definition.name)).toEqual(['exp__ping']);
        const pong = await again.value.tools[0]?.run({}, ctx());
        expect(pong?.ok && pong.output.stdout).toMatch(/^pong from session-\d+$/);
        expect(sessions.size).toBe(2);
        await again.value.close();
        expect(await again.value.tools[0]?.run({}, ctx())).toEqual(failure('MCP exp__ping: connection is closed'));
      } finally {
        await sessions.closeAll();
      }
    });

    it('uses a legacy HTTP+SSE server', async () => {
      const connected = await connectMcpServer({ id: 'old', url: inject('mcpEverythingSseUrl') }, { policy: LOCAL_SERVERS });
      if (!connected.ok) throw new Error(connected.error);
      try {
        const echo = connected.value.tools.find((t) => t.definition.name === 'old__echo');
        expect(await echo?.run({ message: 'sse' }, ctx())).toEqual(success('Echo: sse'));
      } finally {
        await connected.value.close();
      }
    });

    it('reports connection failures as values', async () => {
      expect(await connectMcpServer({ id: 'bad id', url: EVERYTHING })).toEqual({
        ok: false,
        error: 'MCP server bad id: id must match [a-zA-Z0-9_-]{1,32}',
      });
      expect(await connectMcpServer({ id: 'x', url: 'not a url' })).toEqual({ ok: false, error: 'MCP server x: invalid URL' });
      expect(await connectMcpServer({ id: 'x', url: 'ftp://127.0.0.1/' })).toEqual({
        ok: false,
        error: 'MCP server x: refused: only http and https URLs are allowed',
      });
      expect(await connectMcpServer({ id: 'missing', url: `${FIXTURE}/nothing-here` }, { policy: LOCAL_SERVERS })).toEqual({
        ok: false,
        error: 'MCP server missing: Streamable HTTP error (HTTP 404): Error POSTing to endpoint: not found (legacy HTTP+SSE: SSE error: Non-200 status code (404))',
      });
      expect(await connectMcpServer({ id: 'slowpoke', url: `${FIXTURE}/slow-headers?ms=3000` }, { policy: LOCAL_SERVERS, connectTimeoutMs: 300 })).toEqual({
        ok: false,
        error: 'MCP server slowpoke: timed out after 300 ms',
      });
      expect(await connectMcpServer({ id: 'x', url: EVERYTHING }, { policy: LOCAL_SERVERS }, AbortSignal.abort())).toEqual({
        ok: false,
        error: 'MCP server x: aborted',
      });
    });
  });
});

// ---- registry --------------------------------------------------------------------------------

describe('registry', () => {
  it('builds built-ins and MCP tools from the agent config', async () => {
    const registry = await buildToolRunner(
      {
        tools: ['calculator', 'web_fetch'],
        web_fetch_hosts: ['127.0.0.1'],
        mcp_servers: [{ id: 'everything', url: EVERYTHING }],
      },
      { webFetch: { policy: DEVELOPMENT }, mcp: { policy: LOCAL_SERVERS } },
    );
    try {
      expect(registry.problems).toEqual([]);
      const defs = registry.definitions();
      expect(defs.slice(0, 2).map((d) => d.name)).toEqual(['calculator', 'web_fetch']);
      expect(defs.map((d) => d.name)).toContain('everything__echo');
      expect(defs.find((d) => d.name === 'calculator')).toEqual(CALCULATOR_DEFINITION);
      expect(registry.has('everything__get-sum')).toBe(true);

      // The NIP-XX ai.tool_call example.
      expect(await registry.run('calculator', { expr: '12 * 7' }, never())).toEqual(success('84'));
      expect(await registry.run('web_fetch', { url: `${FIXTURE}/text` }, never())).toEqual(
        success('hello from the fixture', 'HTTP 200'),
      );
      expect(await registry.run('everything__echo', { message: 'via registry' }, never())).toEqual(success('Echo: via registry'));
      expect(await registry.run('everything__get-sum', { a: 1, b: 2 }, never())).toEqual(success('The sum of 1 and 2 is 3.'));

      expect(await registry.run('shell', { cmd: 'ls' }, never())).toEqual({ ok: false, unknown: true, error: 'unknown tool "shell"' });
      expect(await registry.run('everything__nope', {}, never())).toEqual({
        ok: false,
        unknown: true,
        error: 'unknown tool "everything__nope"',
      });
      expect(await registry.run('calculator', { expr: 1 }, never())).toEqual(failure('invalid arguments: "expr" must be a string'));
      expect(await registry.run('calculator', 'x', never())).toEqual(failure('invalid arguments: expected an object'));
      expect(await registry.run('everything__get-sum', { a: '1', b: 2 }, never())).toEqual(
        failure('invalid arguments: "a" must be a number'),
      );
    } finally {
      await registry.close();
    }
  });

  it('offers only the configured tools', async () => {
    const registry = await buildToolRunner({ tools: ['calculator'] });
    expect(registry.definitions().map((d) => d.name)).toEqual(['calculator']);
    expect(await registry.run('web_fetch', { url: 'https://example.com/' }, never())).toEqual({
      ok: false,
      unknown: true,
      error: 'unknown tool "web_fetch"',
    });
    const empty = await buildToolRunner({});
    expect(empty.definitions()).toEqual([]);
    expect(empty.problems).toEqual([]);
  });

  it('reports what it could not set up, and keeps the rest', async () => {
    const registry = await buildToolRunner(
      {
        tools: ['calculator', 'shell', 'web_fetch', 'calculator'],
        web_fetch_hosts: ['http://x.com'],
        mcp_servers: [
          { id: 'paged', url: `${FIXTURE}/mcp-paged` },
          { id: 'paged', url: EVERYTHING },
          { id: 'gone', url: `${FIXTURE}/nothing-here` },
        ],
      },
      { mcp: { maxTools: 1, policy: LOCAL_SERVERS } },
    );
    try {
      expect(registry.definitions().map((d) => d.name)).toEqual(['calculator', 'web_fetch', 'paged__lookup']);
      expect(registry.problems).toEqual([
        'unknown built-in tool "shell" skipped (known: calculator, web_fetch)',
        'web_fetch: host pattern "http://x.com" is not valid, ignored',
        'web_fetch: no allowed hosts, every call is refused',
        'MCP server paged: the id is used twice, the second one is skipped',
        'MCP server paged: skipped search.web (over the tool limit of 1)',
        'MCP server paged: skipped whoami (over the tool limit of 1)',
        'MCP server paged: skipped an_extremely_long_tool_name_that_goes_on_and_on_past_the_sixty_four_character_limit (over the tool limit of 1)',
        'MCP server paged: skipped fails (over the tool limit of 1)',
        'MCP server paged: skipped mixed (over the tool limit of 1)',
        'MCP server paged: skipped slow (over the tool limit of 1)',
        'MCP server gone: Streamable HTTP error (HTTP 404): Error POSTing to endpoint: not found (legacy HTTP+SSE: SSE error: Non-200 status code (404))',
      ]);
      expect(await registry.run('web_fetch', { url: 'https://x.com/' }, never())).toEqual(
        failure('web_fetch is disabled: no allowed hosts are configured'),
      );
    } finally {
      await registry.close();
    }
  });
});
