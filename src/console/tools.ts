// The tools panel: DVMCP servers and tools announced on the public shard (dvmcp-discovery.ts), the
// servers of this deployment's bridges (named by the public shard's NIP-11 `bridge_providers`) first,
// each entry with its provider (anyone may announce a server under any name); a
// form generated from a tool's input schema (string, number, integer and boolean fields; anything
// else as JSON), and the call through the DVMCP client with its progress shown. Calls use a fresh
// key per page (servers see an unlinkable client; its own relay connection is authenticated as it,
// so gift-wrapped answers reach it), gift-wrapped when the server supports it; priced
// tools are declined (the console does not pay). The output log keeps its last MAX_LOG_LINES lines (dom.ts) (a
// server may send a progress notification, a line each, for as long as a call lasts), and what a
// result holds other than text is shown as compact JSON, cut, and only within MAX_JSON_DEPTH
// (src/shared/json-depth.ts shownJson: a server's answer may nest deeper than JSON.stringify can write).

import { generateSecretKey } from 'nostr-tools/pure';
import { signEvent } from '../shared/ao-keys.js';
import { DvmcpClient } from '../shared/dvmcp-client.js';
import { bridgeProvidersOf, discover, providerLabel, type CatalogServer, type CatalogTool } from '../shared/dvmcp-discovery.js';
import { err, errorMessage, ok, type Result } from '../shared/errors.js';
import { shownJson } from '../shared/json-depth.js';
import { ConversationKeyCache } from '../shared/nip44.js';
import { nobleVerifier } from '../shared/verify.js';
import { appendLogLine, button, byId, el } from './dom.js';
import { Relays, shardUrl } from './relay.js';
import { localSigner } from './signer.js';

/** At most this many lines stay in the tool output log (the oldest go first). */
/** Characters of a result's non-text content shown at most (each item, or the whole result without content). */
const RESULT_JSON_CHARS = 16_384;

interface Field {
  name: string;
  type: string;
  required: boolean;
  input: HTMLInputElement | HTMLTextAreaElement;
}

const propertiesOf = (schema: Record<string, unknown>): Array<[string, Record<string, unknown>]> => {
  const props = schema.properties;
  if (typeof props !== 'object' || props === null) return [];
  return Object.entries(props as Record<string, unknown>).map(([k, v]) => [k, typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : {}]);
};

/** This deployment's bridges, as the public shard's NIP-11 document names them. */
async function bridgeProviders(): Promise<Result<string[], string>> {
  try {
    const res = await fetch('/', { headers: { Accept: 'application/nostr+json' } });
    if (!res.ok) return err(`cannot read this deployment's bridges from its NIP-11 document: HTTP ${res.status}`);
    return ok(bridgeProvidersOf(await res.json()));
  } catch (e) {
    return err(`cannot read this deployment's bridges from its NIP-11 document: ${errorMessage(e)}`);
  }
}

export class ToolsPanel {
  /** Connections authenticated as the panel's own key, so gift-wrapped answers reach it. */
  readonly #relays: Relays;
  readonly #list = byId('tool-list');
  readonly #form = byId<HTMLFormElement>('tool-form');
  readonly #out = byId('tool-output');
  readonly #sk = generateSecretKey();
  #client: DvmcpClient | undefined;
  #selected: { server: CatalogServer; tool: CatalogTool; fields: Field[] } | undefined;

  constructor() {
    this.#relays = new Relays(localSigner(this.#sk));
    byId('tools-refresh').addEventListener('click', () => void this.#refresh());
    this.#form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      void this.#call();
    });
  }

  #print(text: string): void {
    appendLogLine(this.#out, el('div', 'line', text));
  }

  async #refresh(): Promise<void> {
    const relay = await this.#relays.get(shardUrl('/'));
    if (!relay.ok) return this.#print(relay.error);
    const bridges = await bridgeProviders();
    if (!bridges.ok) return this.#print(bridges.error);
    const catalog = await discover(relay.value, { verifier: nobleVerifier, preferred: bridges.value });
    if (!catalog.ok) return this.#print(catalog.error);
    this.#list.replaceChildren();
    for (const server of catalog.value.servers) {
      for (const tool of server.tools) {
        const li = el('li');
        const price = tool.price ? ` · ${JSON.stringify(tool.price)}` : '';
        li.append(el('strong', undefined, `${server.name ?? server.id} / ${tool.name}`), el('div', undefined, `provider ${providerLabel(server)}`), el('div', undefined, `${tool.description ?? ''}${price}`));
        li.append(button(`Use ${server.id}/${tool.name}`, () => this.#select(server, tool), 'secondary'));
        this.#list.append(li);
      }
    }
    if (this.#list.childElementCount === 0) this.#list.append(el('li', undefined, 'No DVMCP tools are announced on this relay.'));
  }

  #select(server: CatalogServer, tool: CatalogTool): void {
    const required = new Set(Array.isArray(tool.inputSchema.required) ? tool.inputSchema.required.map(String) : []);
    const container = byId('tool-fields');
    container.replaceChildren();
    const fields: Field[] = [];
    for (const [name, prop] of propertiesOf(tool.inputSchema)) {
      const type = typeof prop.type === 'string' ? prop.type : 'json';
      const id = `tool-field-${fields.length}`;
      const label = el('label', undefined, `${name}${required.has(name) ? ' (required)' : ''}${typeof prop.description === 'string' ? ` — ${prop.description}` : ''}`);
      label.htmlFor = id;
      let input: HTMLInputElement | HTMLTextAreaElement;
      if (type === 'boolean') {
        input = el('input');
        input.type = 'checkbox';
      } else if (type === 'string' || type === 'number' || type === 'integer') {
        input = el('input');
        input.type = type === 'string' ? 'text' : 'number';
        if (type === 'integer') input.step = '1';
      } else {
        input = el('textarea');
        input.placeholder = 'JSON';
      }
      input.id = id;
      container.append(label, input);
      fields.push({ name, type, required: required.has(name), input });
    }
    byId('tool-form-title').textContent = `${server.id}/${tool.name}`;
    this.#form.hidden = false;
    this.#selected = { server, tool, fields };
  }

  #arguments(fields: Field[]): { ok: true; value: Record<string, unknown> } | { ok: false; error: string } {
    const args: Record<string, unknown> = {};
    for (const f of fields) {
      const raw = f.input.value.trim();
      if (f.type === 'boolean') {
        args[f.name] = (f.input as HTMLInputElement).checked;
        continue;
      }
      if (raw === '') {
        if (f.required) return { ok: false, error: `${f.name} is required` };
        continue;
      }
      if (f.type === 'string') args[f.name] = f.input.value;
      else if (f.type === 'number' || f.type === 'integer') {
        const n = Number(raw);
        if (!Number.isFinite(n) || (f.type === 'integer' && !Number.isInteger(n))) return { ok: false, error: `${f.name} must be ${f.type === 'integer' ? 'an integer' : 'a number'}` };
        args[f.name] = n;
      } else {
        try {
          args[f.name] = JSON.parse(raw);
        } catch {
          return { ok: false, error: `${f.name} must be JSON` };
        }
      }
    }
    return { ok: true, value: args };
  }

  async #call(): Promise<void> {
    const sel = this.#selected;
    if (!sel) return;
    const args = this.#arguments(sel.fields);
    if (!args.ok) return this.#print(args.error);
    if (!this.#client) {
      const relay = await this.#relays.get(shardUrl('/'));
      if (!relay.ok) return this.#print(relay.error);
      const sk = this.#sk;
      this.#client = new DvmcpClient({ relays: relay.value, secretKey: sk, keys: new ConversationKeyCache(32), sign: (t) => Promise.resolve(signEvent(t, sk)), verifier: nobleVerifier });
    }
    this.#print(`calling ${sel.server.id}/${sel.tool.name}…`);
    const r = await this.#client.request(
      { provider: sel.server.provider, serverId: sel.server.id, encrypt: sel.server.encryption },
      'tools/call',
      { name: sel.tool.name, arguments: args.value },
      {
        onProgress: (p) => this.#print(`progress ${String(p.progress ?? '?')}${p.total !== undefined ? `/${String(p.total)}` : ''}${typeof p.message === 'string' ? ` ${p.message}` : ''}`),
        onPaymentRequired: () => false,
      },
    );
    if (!r.ok) return this.#print(`failed (${r.error.kind}): ${r.error.message}`);
    const content = Array.isArray(r.value.content) ? r.value.content : [];
    const texts = content.map((c: unknown) => (typeof c === 'object' && c !== null && 'text' in c && typeof c.text === 'string' ? c.text : shownJson(c, RESULT_JSON_CHARS)));
    this.#print(`result${r.value.isError === true ? ' (tool error)' : ''}: ${texts.join('\n') || shownJson(r.value, RESULT_JSON_CHARS)}`);
  }
}
