// The web console's entry (bundled to dist/console/console.js, served at /console/console.js):
// sign-in, the agent picker and chat, the owner panel and the tools panel, wired to the page of
// workers/console/page.ts. A key that may not own agents here sees, instead of the owner panel,
// the server's reason (how to become an owner) as a status line in the owner area.

import { z } from 'zod';
import { errorMessage } from '../shared/errors.js';
import { parsePubkey, toNpub } from '../shared/keys.js';
import { listAgents, type AgentView } from './api.js';
import { Chat, type AgentTarget } from './chat.js';
import { ConversationView } from './conversation-view.js';
import { byId, el, short } from './dom.js';
import { OwnerPanel } from './owner.js';
import { Relays, shardUrl } from './relay.js';
import { forgetLocalKey, hasNip07, keepLocalKey, nip07Signer, parseSecretKey, storedSigner, type Signer } from './signer.js';
import { ToolsPanel } from './tools.js';

const HealthSchema = z.looseObject({ demo: z.object({ owner: z.string(), agent: z.string(), relay: z.string() }).optional() });
const LAST_AGENT_KEY = 'edgestr.console.agent';

function notice(text: string | undefined): void {
  const n = byId('notice');
  n.textContent = text ?? '';
  n.hidden = !text;
}

async function demoAgent(): Promise<AgentTarget | undefined> {
  try {
    const res = await fetch('/health');
    const parsed = HealthSchema.safeParse(await res.json());
    if (!parsed.success || !parsed.data.demo) return undefined;
    return { pubkey: parsed.data.demo.agent, relay: shardUrl(parsed.data.demo.relay) };
  } catch (e) {
    notice(`GET /health failed: ${errorMessage(e)}`);
    return undefined;
  }
}

/** The picker **Agent**: the demo agent (preselected), the caller's agents, pasted keys. */
class AgentPicker {
  readonly #select = byId<HTMLSelectElement>('agent');
  readonly #targets = new Map<string, AgentTarget>();
  readonly #onPick: (t: AgentTarget) => void;

  constructor(onPick: (t: AgentTarget) => void) {
    this.#onPick = onPick;
    this.#select.addEventListener('change', () => this.#picked());
  }

  add(target: AgentTarget, label: string): void {
    if (this.#targets.has(target.pubkey)) return;
    this.#targets.set(target.pubkey, target);
    const o = el('option', undefined, label);
    o.value = target.pubkey;
    this.#select.append(o);
  }

  /** Selects `pubkey` (or the first agent) and opens it. */
  select(pubkey: string | undefined): void {
    if (pubkey && this.#targets.has(pubkey)) this.#select.value = pubkey;
    this.#picked();
  }

  #picked(): void {
    const t = this.#targets.get(this.#select.value);
    if (!t) return;
    localStorage.setItem(LAST_AGENT_KEY, t.pubkey);
    this.#onPick(t);
  }
}

function showSignIn(): void {
  byId('signin').hidden = false;
  for (const id of ['chat', 'owner', 'tools', 'account']) byId(id).hidden = true;
  if (hasNip07()) {
    byId('use-nip07').hidden = false;
    byId('signin-hint').textContent = 'A NIP-07 extension was found: sign in with it, or use a key kept in this browser.';
  }
}

async function signedIn(signer: Signer): Promise<void> {
  notice(undefined);
  byId('signin').hidden = true;
  byId('account').hidden = false;
  byId('npub').textContent = toNpub(signer.pubkey);
  byId('chat').hidden = false;
  byId('tools').hidden = false;

  const relays = new Relays(signer);
  const send = byId<HTMLButtonElement>('send');
  const stop = byId<HTMLButtonElement>('stop');
  const status = byId('status');
  const chat = new Chat(signer, relays, {
    view: new ConversationView(byId('conversation')),
    status: (t) => {
      status.textContent = t;
    },
    running: (active) => {
      stop.hidden = !active;
      send.disabled = active;
    },
  });
  const picker = new AgentPicker((t) => void chat.open(t));

  byId('sign-out').addEventListener('click', () => {
    relays.closeAll();
    forgetLocalKey();
    localStorage.removeItem(LAST_AGENT_KEY);
    location.reload();
  });
  byId<HTMLFormElement>('composer').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const box = byId<HTMLTextAreaElement>('message');
    const text = box.value.trim();
    if (!text) return;
    box.value = '';
    chat.send(text).catch((e: unknown) => notice(`the message was not sent: ${errorMessage(e)}`));
  });
  byId<HTMLTextAreaElement>('message').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey) {
      ev.preventDefault();
      byId<HTMLFormElement>('composer').requestSubmit();
    }
  });
  stop.addEventListener('click', () => chat.stop().catch((e: unknown) => notice(`the cancel was not sent: ${errorMessage(e)}`)));
  byId<HTMLFormElement>('add-agent-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const input = byId<HTMLInputElement>('add-agent');
    const hex = parsePubkey(input.value.trim());
    if (!hex) return notice('an agent is named by its npub or 64-hex public key');
    notice(undefined);
    input.value = '';
    picker.add({ pubkey: hex, relay: shardUrl('/') }, `${short(hex)} (public relay)`);
    picker.select(hex);
  });

  const demo = await demoAgent();
  if (demo) picker.add(demo, 'edgestr demo agent (local development)');
  const owned = await listAgents(signer);
  if (!owned.ok && owned.status !== 403) notice(`your agents could not be listed: ${owned.message}`);
  const mine: AgentView[] = owned.ok ? owned.value : [];
  for (const a of mine) picker.add({ pubkey: a.pubkey, relay: shardUrl(`/r/${signer.pubkey}`) }, `${a.name} (yours)`);
  picker.select(localStorage.getItem(LAST_AGENT_KEY) ?? demo?.pubkey);

  if (owned.ok) {
    const panel = new OwnerPanel(signer, relays, (a) => picker.add({ pubkey: a.pubkey, relay: shardUrl(`/r/${signer.pubkey}`) }, `${a.name} (yours)`));
    byId('owner').hidden = false;
    byId('owner-panel').hidden = false;
    panel.show(mine);
  } else if (owned.status === 403) {
    // Not an owner here: the owner area says why and what to do (sign up, or ask the operators), in the server's words.
    byId('owner-notice').textContent = owned.message;
    byId('owner-notice').hidden = false;
    byId('owner').hidden = false;
  }
  new ToolsPanel();
}

function start(): void {
  // Anything that fails outside the handled paths (an extension refusing to sign, say) is shown.
  window.addEventListener('unhandledrejection', (ev) => notice(`something failed: ${errorMessage(ev.reason)}`));
  const stored = storedSigner();
  if (stored) {
    void signedIn(stored);
    return;
  }
  showSignIn();
  byId('use-local').addEventListener('click', () => void signedIn(keepLocalKey()));
  byId('use-nip07').addEventListener('click', async () => {
    const s = await nip07Signer();
    if (s.ok) void signedIn(s.value);
    else notice(s.error);
  });
  byId<HTMLFormElement>('import-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const input = byId<HTMLInputElement>('import-key');
    const sk = parseSecretKey(input.value);
    input.value = '';
    if (sk.ok) void signedIn(keepLocalKey(sk.value));
    else notice(sk.error);
  });
}

start();
