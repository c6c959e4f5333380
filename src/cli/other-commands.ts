// `edgestr keygen|whoami|signup|observe|cancel-turn|tools|call|relay info`.
import { describeKey, newKeyPair, writeKeyFile } from '../client/keys.js';
import { ManagementClient } from '../client/api.js';
import { findAgent } from '../client/agents.js';
import { deploymentUrl, NOT_A_RELAY_URL, relayInfo } from '../client/http.js';
import { observeAgents } from '../client/observe.js';
import { callTool, listTools, lookupServer, payLocalInvoice } from '../client/tools.js';
import type { PaymentRequired } from '../shared/dvmcp.js';
import { providerLabel, type CatalogServer } from '../shared/dvmcp-discovery.js';
import { createInterface } from 'node:readline/promises';
import { MAX_JSON_DEPTH, nestsWithin } from '../shared/json-depth.js';
import { parsePubkey, toNpub } from '../shared/keys.js';
import { keyValues, secondsOption } from './args.js';
import { dropLine, frameJson, frameLine, gapLine } from './observe-lines.js';
import { Context, EXIT, Failure, httpFailure, jsonLine } from './context.js';
import { terminalSafe } from './terminal-safe.js';

/** A stranger's value shown within one line (a name, a price): newlines escaped too. */
const oneLine = (text: string): string => terminalSafe(text, { singleLine: true });

export async function keygenCommand(ctx: Context): Promise<number> {
  const key = newKeyPair();
  const written = await writeKeyFile(ctx.keyPath, key, ctx.options.force === true);
  if (!written.ok) throw new Failure(EXIT.USAGE, written.error);
  const d = describeKey(key);
  ctx.emit({ ...d, file: ctx.keyPath }, d.npub);
  return EXIT.OK;
}

export async function whoamiCommand(ctx: Context): Promise<number> {
  const d = describeKey(await ctx.key());
  ctx.emit(d, `${d.npub}\n${d.hex}`);
  return EXIT.OK;
}

/** POST /api/signup signed by the key in use: it becomes an owner (where sign-up is open; closed: 403, exit 5). */
export async function signupCommand(ctx: Context): Promise<number> {
  const r = await new ManagementClient(ctx.url, await ctx.key()).signUp();
  if (!r.ok) throw httpFailure(r.error, 'signup');
  ctx.emit(r.value, `signed up ${toNpub(r.value.pubkey)} as an owner on ${ctx.url} (plan ${r.value.plan})`);
  return EXIT.OK;
}

async function agentHex(ctx: Context, agent: string): Promise<string> {
  const found = agent === 'demo' ? await findAgent(ctx.url, agent) : undefined;
  if (found && !found.ok) throw new Failure(EXIT.CONNECT, found.error.message);
  const hex = found?.ok ? found.value.pubkey : parsePubkey(agent);
  if (!hex) throw new Failure(EXIT.USAGE, `not an agent: ${agent} (expected 64-hex, npub or demo)`);
  return hex;
}

/** Watches the owner's telemetry until SIGINT/SIGTERM (or the end of stdin when it is not a terminal). */
export async function observeCommand(ctx: Context, args: string[]): Promise<number> {
  const owner = await ctx.key();
  let agents: string[];
  if (args[0]) agents = [await agentHex(ctx, args[0])];
  else {
    const list = await new ManagementClient(ctx.url, owner).listAgents();
    if (!list.ok) throw httpFailure(list.error, 'agent list');
    agents = list.value.map((a) => a.pubkey);
    if (agents.length === 0) throw new Failure(EXIT.USAGE, 'you have no agents to observe (name one: edgestr observe <agent>)');
  }
  const watching = await observeAgents(ctx.url, owner, agents, {
    onFrame: (f) => ctx.emit(frameJson(f), frameLine(f)),
    onGap: (g) => ctx.emit({ type: 'gap', ...g }, gapLine(g)),
    onDropReport: (agent, dropped) => ctx.emit({ type: 'dropped', agent, dropped }, dropLine(agent, dropped)),
    onRejected: (reason, e) => ctx.err(`rejected frame ${e.id.slice(0, 8)}: ${reason}\n`),
    onClosed: (m) => ctx.err(`subscription closed: ${m}\n`),
  });
  if (!watching.ok) throw new Failure(EXIT.CONNECT, watching.error);
  ctx.err(`observing ${agents.length} agent(s) on ${watching.value.relay.url}; Ctrl-C stops\n`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  watching.value.stop();
  return EXIT.OK;
}

export async function cancelTurnCommand(ctx: Context, args: string[]): Promise<number> {
  const owner = await ctx.key();
  const agent = await agentHex(ctx, args[0]!);
  const watching = await observeAgents(ctx.url, owner, [agent], {});
  if (!watching.ok) throw new Failure(EXIT.CONNECT, watching.error);
  try {
    const r = await watching.value.observer.cancelTurn(agent, args[1]!);
    if (!r.ok) throw new Failure(EXIT.CONNECT, `cancel_turn refused: ${r.message}`);
    ctx.emit({ cancelled: args[1], agent, event: r.event?.id }, `cancel_turn sent for run ${args[1]}`);
    return EXIT.OK;
  } finally {
    watching.value.stop();
  }
}

export async function toolsCommand(ctx: Context): Promise<number> {
  const catalog = await listTools(ctx.url);
  if (!catalog.ok) throw new Failure(EXIT.CONNECT, catalog.error);
  if (ctx.json) for (const s of catalog.value.servers) ctx.emit(s, '');
  else if (catalog.value.servers.length === 0) ctx.out('no DVMCP servers announced\n');
  else
    for (const s of catalog.value.servers) {
      // Anyone may announce: names, prices and descriptions are shown escaped (ctx.out), on one line
      // each; the servers of this deployment's bridges come first, marked.
      const bridge = s.preferred ? "  (this deployment's bridge)" : '';
      ctx.out(`${s.id}  ${oneLine(s.name ?? '')}  provider ${s.provider}${bridge}${s.encryption ? '  (encrypted)' : ''}\n`);
      for (const t of s.tools) {
        const price = t.price ? `  [${oneLine(t.price.price)} ${oneLine(t.price.unit)}]` : '';
        ctx.out(`  ${oneLine(t.name)}${price}${t.description ? `  ${oneLine(t.description.split('\n')[0]!)}` : ''}\n`);
      }
    }
  return EXIT.OK;
}

/**
 * A payment request of `server` within --max-sats, said with the server's id and provider: on a
 * terminal, asked first; then paid at the deployment when it is a local invoice (development), else
 * shown for the user's wallet while the call waits.
 */
async function pay(ctx: Context, server: CatalogServer, p: PaymentRequired): Promise<boolean> {
  const whose = `${server.id}, provider ${providerLabel(server)}`;
  ctx.err(`[payment required: ${p.sats} sats to ${whose}]\n`);
  if (ctx.io.stdin.isTTY) {
    const rl = createInterface({ input: ctx.io.stdin, output: ctx.io.stderr });
    const answer = await rl.question(`pay ${p.sats} sats to ${whose}? [y/N] `);
    rl.close();
    if (!/^y(es)?$/i.test(answer.trim())) return false;
  }
  const local = await payLocalInvoice(ctx.url, p.invoice);
  if (local.ok) {
    ctx.err(`[paid ${p.sats} sats (local invoice)]\n`);
    return true;
  }
  ctx.err(`[pay this invoice with your wallet; waiting for the payment: ${oneLine(p.invoice)}]\n`);
  return true;
}

export async function callCommand(ctx: Context, args: string[]): Promise<number> {
  const [serverName, tool, ...pairs] = args as [string, string, ...string[]];
  const kv = keyValues(pairs);
  if (!kv.ok) throw new Failure(EXIT.USAGE, kv.error);
  const maxSats = Number(ctx.string('max-sats') ?? '0');
  if (!Number.isInteger(maxSats) || maxSats < 0) throw new Failure(EXIT.USAGE, '--max-sats must be a whole number ≥ 0');
  const timeout = secondsOption(ctx.string('timeout'), 'timeout');
  if (!timeout.ok) throw new Failure(EXIT.USAGE, timeout.error);
  const catalog = await listTools(ctx.url);
  if (!catalog.ok) throw new Failure(EXIT.CONNECT, catalog.error);
  const found = lookupServer(catalog.value, serverName);
  if (!found.ok && found.error.reason === 'ambiguous') throw new Failure(EXIT.USAGE, found.error.message);
  if (!found.ok) throw new Failure(EXIT.CONNECT, `${found.error.message} on ${ctx.url} (see edgestr tools)`);
  const server = found.value;
  const key = await ctx.keyOrFresh();
  ctx.err(`[calling ${oneLine(tool)} on ${server.id}, provider ${providerLabel(server)}]\n`);
  const r = await callTool(ctx.url, key, server, tool, kv.value, {
    maxSats,
    ...(timeout.value ? { timeoutMs: timeout.value } : {}),
    onProgress: (p) => ctx.err(oneLine(`[progress ${p.progress ?? ''}${p.total !== undefined ? `/${p.total}` : ''}${p.message ? ` ${p.message}` : ''}]`) + '\n'),
    pay: (p) => pay(ctx, server, p),
  });
  if (!r.ok) {
    const code = r.error.kind === 'timeout' ? EXIT.TIMEOUT : r.error.kind === 'relay' ? EXIT.CONNECT : EXIT.AGENT_ERROR;
    const declined = r.error.kind === 'payment' ? ` (not paid: --max-sats ${maxSats})` : '';
    ctx.err(`error ${r.error.kind}: ${r.error.message}${declined}\n`);
    return code;
  }
  const content: unknown[] = Array.isArray(r.value.content) ? r.value.content : [];
  const text = content
    .filter((c): c is { type: 'text'; text?: unknown } => typeof c === 'object' && c !== null && (c as { type?: unknown }).type === 'text')
    .map((c) => (typeof c.text === 'string' ? c.text : ''))
    .join('\n');
  // The text content is printed as it is; the whole result (--json, or no text) only within
  // MAX_JSON_DEPTH (a deeper result would throw in JSON.stringify; --json: terminalJson's own limit).
  if (!ctx.json && !text && !nestsWithin(r.value)) throw new Failure(EXIT.CONNECT, `the result of ${tool} on ${server.id} nests deeper than ${MAX_JSON_DEPTH} levels, this client's limit`);
  ctx.emit(r.value, ctx.json ? '' : text || JSON.stringify(r.value));
  return r.value.isError === true ? EXIT.AGENT_ERROR : EXIT.OK;
}

/**
 * The most characters of compact JSON `relay info` prints pretty: the pretty form adds a line and
 * its indentation per value (up to 2 × MAX_JSON_DEPTH spaces), so a larger document is printed compact.
 */
const PRETTY_MAX_CHARS = 65_536;

/** The NIP-11 document of `[url]` (else --url's); a url that is not a relay's is bad usage (exit 2). */
export async function relayInfoCommand(ctx: Context, args: string[]): Promise<number> {
  if (args[0] !== undefined && !deploymentUrl(args[0])) throw new Failure(EXIT.USAGE, `relay info: ${args[0]} ${NOT_A_RELAY_URL}`);
  const url = args[0] ?? ctx.url;
  const info = await relayInfo(url);
  if (!info.ok) throw httpFailure(info.error, `relay info ${url}`);
  if (!nestsWithin(info.value)) throw new Failure(EXIT.CONNECT, `relay info ${url}: the NIP-11 document nests deeper than ${MAX_JSON_DEPTH} levels, this client's limit`);
  const compact = jsonLine(info.value);
  const pretty = !ctx.json && compact.length <= PRETTY_MAX_CHARS;
  if (!ctx.json && !pretty) ctx.err(`[the NIP-11 document is ${compact.length} characters of JSON, over ${PRETTY_MAX_CHARS}: printed compact]\n`);
  ctx.out(`${pretty ? jsonLine(info.value, 2) : compact}\n`);
  return EXIT.OK;
}
