// The Agent Durable Object's own row: its config (parsed once, cached until it changes) and its
// sealed secret key (opened with EDGESTR_SECRET on first use and checked against the pubkey), its
// MCP servers' sealed headers (mcp-headers.ts: opened when the agent connects to that server, kept
// in memory until the config changes; plain ones of configs stored before sealing are sealed by
// the watchdog), and the signing of the agent's events with libsecp256k1 in Wasm. While
// EDGESTR_SECRET is rotated, what only EDGESTR_SECRET_PREVIOUS opens is opened with it and sealed
// again with EDGESTR_SECRET by the watchdog (reseal; workers/common/secrets.ts).

import { getPublicKey } from 'nostr-tools/pure';
import { signEventWith, type NostrEvent } from '../../src/shared/event.js';
import type { EventTemplate } from '../../src/shared/relay-client.js';
import { relayVerifier } from '../common/verifier.js';
import { DEFAULT_LIMITS, type StoredAgent, type StoredMcpServer } from './config.js';
import { headersOf, openRotating, resealed, sealingSecrets, type ResealPass, type SealingSecrets, type SecretEnv } from '../common/secrets.js';
import { mcpHeadersBinding, sealMcpServers } from './mcp-headers.js';

/** What a sealed value is, in errors and log lines. */
const keyWhat = (agent: string): string => `the secret key of agent ${agent}`;
const headersWhat = (agent: string, server: string): string => `the headers of MCP server ${server} of agent ${agent}`;

export class AgentStore {
  private sk: Uint8Array | undefined;
  /** null: no agent stored; undefined: not read yet. */
  private cached: StoredAgent | null | undefined;
  /** Opened MCP server headers, by `<server id> <sealed blob>` (emptied when the config changes). */
  private readonly headers = new Map<string, Record<string, string>>();

  constructor(
    private readonly sql: SqlStorage,
    private readonly env: SecretEnv,
  ) {
    this.sql.exec('CREATE TABLE IF NOT EXISTS agent (k INTEGER PRIMARY KEY CHECK (k = 1), config TEXT NOT NULL, sealed_key TEXT NOT NULL)');
  }

  /** The stored config, parsed once and kept until it changes (it is read for every event a run publishes). */
  config(): StoredAgent | undefined {
    if (this.cached === undefined) {
      const row = this.sql.exec<{ config: string }>('SELECT config FROM agent WHERE k = 1').toArray()[0];
      const stored = row ? (JSON.parse(row.config) as StoredAgent) : null;
      // Limits added later (e.g. the per-agent caps) take their defaults for agents stored before them.
      this.cached = stored && { ...stored, limits: { ...DEFAULT_LIMITS, ...stored.limits } };
    }
    return this.cached ?? undefined;
  }

  /** Stores the agent (for the same key again: replaces the config, keeps the sealed key). */
  create(config: StoredAgent, sealedKey: string): void {
    this.sql.exec(
      'INSERT INTO agent (k, config, sealed_key) VALUES (1, ?, ?) ON CONFLICT (k) DO UPDATE SET config = excluded.config',
      JSON.stringify(config),
      sealedKey,
    );
    this.forgetConfig();
  }

  update(next: StoredAgent): void {
    this.sql.exec('UPDATE agent SET config = ? WHERE k = 1', JSON.stringify(next));
    this.forgetConfig();
  }

  /** Drops the opened key (it is opened again from the table on next use). */
  forgetKey(): void {
    this.sk = undefined;
  }

  /** Drops the cached config (after the table changed underneath, e.g. emptied). */
  reload(): void {
    this.forgetConfig();
  }

  private forgetConfig(): void {
    this.cached = undefined;
    this.headers.clear();
  }

  private secrets(): SealingSecrets {
    const secrets = sealingSecrets(this.env);
    if (!secrets) throw new Error('EDGESTR_SECRET is not configured');
    return secrets;
  }

  /**
   * The headers of MCP server `s` (one of the stored config's): opened for this agent and `s.id`
   * (a blob sealed for another agent or server does not open: throws), or plain ones as stored
   * before sealing.
   */
  async mcpHeaders(s: StoredMcpServer): Promise<Record<string, string>> {
    if (s.sealed_headers === undefined) return s.headers ?? {};
    const key = `${s.id} ${s.sealed_headers}`;
    const cached = this.headers.get(key);
    if (cached) return cached;
    const agent = this.config()?.pubkey;
    if (!agent) throw new Error('no agent is stored');
    const headers = headersOf((await openRotating(s.sealed_headers, mcpHeadersBinding(agent, s.id), this.secrets(), headersWhat(agent, s.id))).plain);
    this.headers.set(key, headers);
    return headers;
  }

  /**
   * Seals the plain MCP server headers of a config stored before they were sealed (the watchdog
   * calls it); the row is written only if it did not change meanwhile (a PATCH wins).
   */
  async sealPlainHeaders(): Promise<void> {
    if (!this.config()?.mcp_servers?.some((s) => s.headers !== undefined)) return;
    const row = this.sql.exec<{ config: string }>('SELECT config FROM agent WHERE k = 1').one();
    const c = JSON.parse(row.config) as StoredAgent;
    const secret = this.secrets().current;
    const sealed = await Promise.all((c.mcp_servers ?? []).map(async (s) => (s.headers === undefined ? s : (await sealMcpServers([s], c.pubkey, secret))[0]!)));
    this.sql.exec('UPDATE agent SET config = ? WHERE k = 1 AND config = ?', JSON.stringify({ ...c, mcp_servers: sealed }), row.config);
    this.forgetConfig();
  }

  /**
   * During a rotation (EDGESTR_SECRET_PREVIOUS set; the watchdog calls it): the key and the MCP
   * server headers that only the previous secret opens are sealed again with EDGESTR_SECRET, each
   * written only if it did not change meanwhile (a PATCH wins; the next pass sees the rest).
   * Undefined outside a rotation.
   */
  async reseal(): Promise<ResealPass | undefined> {
    const secrets = sealingSecrets(this.env);
    if (secrets?.previous === undefined || !this.config()) return undefined;
    const row = this.sql.exec<{ sealed_key: string; config: string }>('SELECT sealed_key, config FROM agent WHERE k = 1').one();
    const c = JSON.parse(row.config) as StoredAgent;
    const pass: ResealPass = { resealed: 0, failed: [] };
    const key = await resealed(row.sealed_key, c.pubkey, secrets, keyWhat(c.pubkey), pass);
    if (key !== undefined && this.sql.exec('UPDATE agent SET sealed_key = ? WHERE k = 1 AND sealed_key = ?', key, row.sealed_key).rowsWritten > 0) pass.resealed++;
    let headers = 0;
    const servers = await Promise.all(
      (c.mcp_servers ?? []).map(async (s) => {
        if (s.sealed_headers === undefined) return s;
        const sealed = await resealed(s.sealed_headers, mcpHeadersBinding(c.pubkey, s.id), secrets, headersWhat(c.pubkey, s.id), pass);
        if (sealed === undefined) return s;
        headers++;
        return { ...s, sealed_headers: sealed };
      }),
    );
    if (headers > 0 && this.sql.exec('UPDATE agent SET config = ? WHERE k = 1 AND config = ?', JSON.stringify({ ...c, mcp_servers: servers }), row.config).rowsWritten > 0) {
      pass.resealed += headers;
      this.forgetConfig();
    }
    return pass;
  }

  async secretKey(): Promise<Uint8Array> {
    if (this.sk) return this.sk;
    const row = this.sql.exec<{ sealed_key: string; config: string }>('SELECT sealed_key, config FROM agent WHERE k = 1').one();
    const c = JSON.parse(row.config) as StoredAgent;
    const sk = (await openRotating(row.sealed_key, c.pubkey, this.secrets(), keyWhat(c.pubkey))).plain;
    if (getPublicKey(sk) !== c.pubkey) throw new Error('stored key does not match the agent pubkey');
    this.sk = sk;
    return sk;
  }

  /** Signs with libsecp256k1 in Wasm (several times faster than pure JS: every run event is signed). */
  async sign(t: EventTemplate, sk: Uint8Array): Promise<NostrEvent> {
    const c = this.config();
    return signEventWith(t, sk, await relayVerifier(), c?.pubkey ?? getPublicKey(sk));
  }
}
