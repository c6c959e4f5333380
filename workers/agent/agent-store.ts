// The Agent Durable Object's own row: its config (parsed once, cached until it changes) and its
// sealed secret key (opened with EDGESTR_SECRET on first use and checked against the pubkey), and
// the signing of the agent's events with libsecp256k1 in Wasm.

import { getPublicKey } from 'nostr-tools/pure';
import { signEventWith, type NostrEvent } from '../../src/shared/event.js';
import type { EventTemplate } from '../../src/shared/relay-client.js';
import { relayVerifier } from '../common/verifier.js';
import { DEFAULT_LIMITS, type StoredAgent } from './config.js';
import { openSecretKey, sealingSecret, type SecretEnv } from '../common/secrets.js';

export class AgentStore {
  private sk: Uint8Array | undefined;
  /** null: no agent stored; undefined: not read yet. */
  private cached: StoredAgent | null | undefined;

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
    this.cached = undefined;
  }

  update(next: StoredAgent): void {
    this.sql.exec('UPDATE agent SET config = ? WHERE k = 1', JSON.stringify(next));
    this.cached = undefined;
  }

  /** Drops the opened key (it is opened again from the table on next use). */
  forgetKey(): void {
    this.sk = undefined;
  }

  /** Drops the cached config (after the table changed underneath, e.g. emptied). */
  reload(): void {
    this.cached = undefined;
  }

  async secretKey(): Promise<Uint8Array> {
    if (this.sk) return this.sk;
    const row = this.sql.exec<{ sealed_key: string; config: string }>('SELECT sealed_key, config FROM agent WHERE k = 1').one();
    const c = JSON.parse(row.config) as StoredAgent;
    const secret = sealingSecret(this.env);
    if (!secret) throw new Error('EDGESTR_SECRET is not configured');
    this.sk = await openSecretKey(row.sealed_key, c.pubkey, secret);
    if (getPublicKey(this.sk) !== c.pubkey) throw new Error('stored key does not match the agent pubkey');
    return this.sk;
  }

  /** Signs with libsecp256k1 in Wasm (several times faster than pure JS: every run event is signed). */
  async sign(t: EventTemplate, sk: Uint8Array): Promise<NostrEvent> {
    const c = this.config();
    return signEventWith(t, sk, await relayVerifier(), c?.pubkey ?? getPublicKey(sk));
  }
}
