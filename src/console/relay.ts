// The console's relay connections: one RelayClient per relay URL over the browser's WebSocket,
// authenticated (NIP-42) as the signed-in key, with every incoming event verified; and a one-shot
// query (REQ until EOSE) for the session-recovery reads.

import { RelayClient } from '../shared/relay-client.js';
import { checkIdAndSignature, type NostrEvent } from '../shared/event.js';
import type { Filter } from '../shared/filters.js';
import { err, ok, type Result } from '../shared/errors.js';
import { nobleVerifier } from '../shared/verify.js';
import type { Signer } from './signer.js';

const QUERY_TIMEOUT_MS = 10_000;

/** The WebSocket URL of a shard path ("/" or "/r/<owner>") on the console's own origin. */
export const shardUrl = (path: string): string => `${location.origin.replace(/^http/, 'ws')}${path}`;

export class Relays {
  readonly #clients = new Map<string, RelayClient>();
  readonly #signer: Signer;

  constructor(signer: Signer) {
    this.#signer = signer;
  }

  /** The client for `url`, opened and authenticated on first use. */
  async get(url: string): Promise<Result<RelayClient, string>> {
    let client = this.#clients.get(url);
    if (!client) {
      client = new RelayClient({
        url,
        socket: (u) => new WebSocket(u),
        auth: (t) => this.#signer.sign(t),
        verify: (e) => checkIdAndSignature(e, nobleVerifier).ok,
      });
      this.#clients.set(url, client);
    }
    if (client.authenticatedAs === this.#signer.pubkey) return ok(client);
    const auth = await client.authenticate();
    return auth.ok ? ok(client) : err(`cannot sign in to ${url}: ${auth.message}`);
  }

  closeAll(): void {
    for (const c of this.#clients.values()) c.close();
    this.#clients.clear();
  }
}

/** The stored events matching `filters` (until EOSE), or the relay's reason for refusing. */
export function query(client: RelayClient, filters: Filter[]): Promise<Result<NostrEvent[], string>> {
  return new Promise((resolve) => {
    const events: NostrEvent[] = [];
    const timer = setTimeout(() => {
      sub.close();
      resolve(err(`no answer from ${client.url} within ${QUERY_TIMEOUT_MS / 1000} s`));
    }, QUERY_TIMEOUT_MS);
    const sub = client.subscribe(filters, {
      onEvent: (e) => events.push(e),
      onEose: () => {
        clearTimeout(timer);
        sub.close();
        resolve(ok(events));
      },
      onClosed: (message) => {
        clearTimeout(timer);
        resolve(err(message));
      },
    });
  });
}
