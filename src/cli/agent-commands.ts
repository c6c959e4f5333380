// `edgestr agent create|list|show|update|delete`: the management API through edgestr/client. `delete`
// of a key that is not one of the caller's hosted agents says that it revoked the caller's NIP-OA
// attestation of the key instead (the API's 200 {revoked}).
import { ManagementClient, type AgentInput, type AgentView } from '../client/api.js';
import { findAgent } from '../client/agents.js';
import { agentProviderLabel } from '../client/schemas.js';
import { parsePubkey, toNpub } from '../shared/keys.js';
import { Context, EXIT, Failure, httpFailure } from './context.js';

const PROVIDERS = ['openai', 'anthropic', 'workers-ai', 'echo'] as const;

/** The agent fields given as options (create and update). */
function agentInput(ctx: Context): AgentInput {
  const input: AgentInput = {};
  const name = ctx.string('name');
  if (name !== undefined) input.name = name;
  const about = ctx.string('about');
  if (about !== undefined) input.about = about;
  const provider = ctx.string('provider');
  if (provider !== undefined) {
    if (!(PROVIDERS as readonly string[]).includes(provider)) throw new Failure(EXIT.USAGE, `--provider must be one of ${PROVIDERS.join(', ')}`);
    input.provider = provider as AgentInput['provider'];
  }
  const models = ctx.list('model');
  if (models.length) {
    input.models = models;
    input.default_model = models[0]!;
  }
  const system = ctx.string('system');
  if (system !== undefined) input.system_prompt = system;
  const tools = ctx.list('tool');
  if (tools.length) input.tools = tools;
  const hosts = ctx.list('web-fetch-host');
  if (hosts.length) input.web_fetch_hosts = hosts;
  return input;
}

/** `<agent>` as a hex key (`demo` through /health). */
async function agentKey(ctx: Context, agent: string): Promise<string> {
  if (agent !== 'demo') {
    const hex = parsePubkey(agent);
    if (!hex) throw new Failure(EXIT.USAGE, `not an agent: ${agent} (expected 64-hex, npub or demo)`);
    return hex;
  }
  const found = await findAgent(ctx.url, agent);
  if (!found.ok) throw new Failure(found.error.reason === 'usage' ? EXIT.USAGE : EXIT.CONNECT, found.error.message);
  return found.value.pubkey;
}

const line = (a: AgentView): string => `${a.pubkey}  ${toNpub(a.pubkey)}  ${a.name ?? ''}  ${agentProviderLabel(a)}${a.default_model ? `/${a.default_model}` : ''}`;

const details = (a: AgentView): string =>
  Object.entries(a)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`)
    .join('\n');

export async function agentCommand(ctx: Context, sub: string, args: string[]): Promise<number> {
  const api = new ManagementClient(ctx.url, await ctx.key());
  switch (sub) {
    case 'create': {
      const input = agentInput(ctx);
      if (!input.name) throw new Failure(EXIT.USAGE, 'agent create needs --name N');
      const r = await api.createAgent(input);
      if (!r.ok) throw httpFailure(r.error, 'agent create');
      ctx.emit(r.value, `created agent ${r.value.npub}\npubkey: ${r.value.pubkey}\nrelays: ${r.value.relays.join(' ')}\nattested by ${r.value.owner} (NIP-OA)`);
      return EXIT.OK;
    }
    case 'list': {
      const r = await api.listAgents();
      if (!r.ok) throw httpFailure(r.error, 'agent list');
      if (ctx.json) for (const a of r.value) ctx.emit(a, '');
      else ctx.out(r.value.length ? `${r.value.map(line).join('\n')}\n` : 'no agents\n');
      return EXIT.OK;
    }
    case 'show': {
      const r = await api.getAgent(await agentKey(ctx, args[0]!));
      if (!r.ok) throw httpFailure(r.error, `agent ${args[0]}`);
      ctx.emit(r.value, details(r.value));
      return EXIT.OK;
    }
    case 'update': {
      const input = agentInput(ctx);
      if (Object.keys(input).length === 0) throw new Failure(EXIT.USAGE, 'agent update needs at least one of --name, --about, --provider, --model, --system, --tool, --web-fetch-host');
      const r = await api.updateAgent(await agentKey(ctx, args[0]!), input);
      if (!r.ok) throw httpFailure(r.error, `agent ${args[0]}`);
      ctx.emit(r.value, details(r.value));
      return EXIT.OK;
    }
    case 'delete': {
      const pubkey = await agentKey(ctx, args[0]!);
      const r = await api.deleteAgent(pubkey);
      if (!r.ok) throw httpFailure(r.error, `agent ${args[0]}`);
      // Not one of the caller's hosted agents: nothing was deleted, the API revoked the caller's attestation of the key.
      ctx.emit(r.value, 'deleted' in r.value ? `deleted agent ${pubkey}` : `revoked your attestation of ${pubkey} (not one of your hosted agents)`);
      return EXIT.OK;
    }
  }
  throw new Failure(EXIT.USAGE, `unknown command: agent ${sub}`);
}
